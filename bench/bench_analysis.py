"""Time to findings: the service's full analysis vs XProf's overview_page conversion alone.

Captures a real Keras job (compute-bound; 1 s and 5 s by default) once, then for each capture,
alternating in the same run on fresh copies (XProf caches results beside the capture):
  - baseline: `xspace_to_tools_data(..., "overview_page")` alone, in this process;
  - analysis: `analyse_run()` (every XProf tool we read, the summary, the rules), in this process;
  - cold:     `XprofAnalyzer.analyze()` on a worker process started for it (the service before
              warm workers: Python, XProf's import and its first call are paid every time);
  - warm:     the same on the service's warm worker (started ahead, XProf imported).
Prints medians and ratios to the baseline. Aim: warm <= 1.15x the baseline.

    .venv/bin/python bench/bench_analysis.py [--durations 1 5] [--rounds 5] [--workload ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_common import free_port, record, start_job

from profiler_service.analysis.analyzer import XprofAnalyzer
from profiler_service.analysis.summary import analyse_run
from profiler_service.analysis.warm_workers import WarmWorkers
from profiler_service.analysis.xprof_tools import tool_data
from profiler_service.capture.capturer import CaptureJob
from profiler_service.capture.remote import RemoteCapturer
from profiler_service.models import CaptureOptions
from profiler_service.targets import Target


def capture(port: int, seconds: float, logdir: Path) -> list[Path]:
    job = CaptureJob(
        snapshot_id=f"bench-{seconds:g}s",
        target=Target(name="bench", workers=[f"127.0.0.1:{port}"]),
        logdir=logdir,
        attempts=2,
        timeout_s=seconds + 60,
        options=CaptureOptions(
            duration_ms=int(seconds * 1000),
            host_tracer_level=2,
            python_tracer_level=0,
            device_tracer_level=1,
        ),
    )
    return RemoteCapturer().capture(job)


def fresh_copy(xplanes: list[Path], root: Path, name: str) -> Path:
    run = root / name
    run.mkdir()
    for p in xplanes:
        shutil.copy(p, run / p.name)
    return run


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", type=float, nargs="+", default=[1.0, 5.0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--workload", default="compute-bound", choices=["input-bound", "compute-bound", "eager"]
    )
    args = parser.parse_args()

    port = free_port()
    job = start_job(port, args.workload)
    root = Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    try:
        captures = {}
        for seconds in args.durations:
            xplanes = capture(port, seconds, root / f"capture-{seconds:g}")
            captures[seconds] = xplanes
    finally:
        job.terminate()
        job.wait(30)

    print(
        f"{'capture':>8} {'size MB':>8} {'overview s':>11} {'analysis s':>11} {'ratio':>6} "
        f"{'cold s':>7} {'ratio':>6} {'warm s':>7} {'ratio':>6}",
        flush=True,
    )
    cold = XprofAnalyzer(timeout_s=600, workers=WarmWorkers(idle_s=0))
    warm = XprofAnalyzer(timeout_s=600)
    warm.warm()
    try:
        for seconds, xplanes in captures.items():
            size_mb = sum(p.stat().st_size for p in xplanes) / 1e6
            arms: dict[str, list[float]] = {"base": [], "full": [], "cold": [], "warm": []}
            runs = {
                "base": lambda run: tool_data(sorted(run.glob("*.xplane.pb")), "overview_page"),
                "full": analyse_run,
                "cold": cold.analyze,
                "warm": warm.analyze,
            }
            for i in range(args.rounds):
                for name, fn in runs.items():
                    run = fresh_copy(xplanes, root, f"{name}-{seconds:g}-{i}")
                    if name == "warm":
                        time.sleep(1)  # as after a capture: the worker is warm and idle
                    arms[name].append(timed(lambda fn=fn, run=run: fn(run)))
            b, f, c, w = (statistics.median(arms[k]) for k in ("base", "full", "cold", "warm"))
            print(
                f"{seconds:>7g}s {size_mb:>8.1f} {b:>11.3f} {f:>11.3f} {f / b:>6.2f} "
                f"{c:>7.3f} {c / b:>6.2f} {w:>7.3f} {w / b:>6.2f}",
                flush=True,
            )
            record(
                f"analysis, warm worker / XProf overview_page alone, {seconds:g} s capture",
                w / b,
                "<= 1.15",
                w / b <= 1.15,
                "x",
            )
            record(
                f"analysis, cold worker (before) / overview_page, {seconds:g} s capture",
                c / b,
                unit="x",
            )
    finally:
        cold.close()
        warm.close()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"medians of {args.rounds} rounds; ratio = time / overview_page alone (same run); aim: "
        f"warm <= 1.15; {os.cpu_count()} cores, load "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )


if __name__ == "__main__":
    main()
