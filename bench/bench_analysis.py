"""Time to findings: the service's full analysis vs XProf's overview_page conversion alone.

Captures a real Keras job (compute-bound; 1 s and 4 s by default) once, then for each capture,
alternating in the same run on fresh copies (XProf caches results beside the capture):
  - baseline: `xspace_to_tools_data(..., "overview_page")` alone, in this process;
  - analysis: `analyse_run()` (every XProf tool we read, the summary, the rules), in this process;
  - service:  `XprofAnalyzer.analyze()`, the worker process the service really runs.
Prints medians and ratios to the baseline. Aim: analysis <= 1.3x the baseline.

    .venv/bin/python bench/bench_analysis.py [--durations 1 4] [--rounds 5] [--workload ...]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_common import free_port, start_job

from profiler_service.analysis.analyzer import XprofAnalyzer
from profiler_service.analysis.summary import analyse_run
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
    parser.add_argument("--durations", type=float, nargs="+", default=[1.0, 4.0])
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
        f"{'service s':>10} {'ratio':>6}"
    )
    analyzer = XprofAnalyzer(timeout_s=600)
    try:
        for seconds, xplanes in captures.items():
            size_mb = sum(p.stat().st_size for p in xplanes) / 1e6
            base, full, service = [], [], []
            for i in range(args.rounds):
                run = fresh_copy(xplanes, root, f"base-{seconds:g}-{i}")
                base.append(
                    timed(
                        lambda run=run: tool_data(sorted(run.glob("*.xplane.pb")), "overview_page")
                    )
                )
                run = fresh_copy(xplanes, root, f"full-{seconds:g}-{i}")
                full.append(timed(lambda run=run: analyse_run(run)))
                run = fresh_copy(xplanes, root, f"service-{seconds:g}-{i}")
                service.append(timed(lambda run=run: analyzer.analyze(run)))
            b, f, s = (statistics.median(x) for x in (base, full, service))
            print(
                f"{seconds:>7g}s {size_mb:>8.1f} {b:>11.3f} {f:>11.3f} {f / b:>6.2f} "
                f"{s:>10.3f} {s / b:>6.2f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("medians of", args.rounds, "rounds; ratio = time / overview_page alone (same run)")


if __name__ == "__main__":
    main()
