"""Time to findings: the service's full analysis vs XProf's overview_page conversion alone.

Captures a real Keras job (compute-bound; 1 s and 5 s by default) once, then for each capture,
alternating in the same run on fresh copies (XProf caches results beside the capture):
  - baseline: `xspace_to_tools_data(..., "overview_page")` alone, in this process;
  - nice 10:  the same in a process of its own at the analysis worker's priority, timed inside;
  - analysis: `analyse_run()` (every XProf tool we read, the summary, the rules), in this process;
  - cold:     `XprofAnalyzer.analyze()` on a worker process started for it (the service before
              warm workers: Python, XProf's import and its first call are paid every time);
  - warm:     the same on the service's warm worker (started ahead, XProf imported);
  - --also-python PYTHON: the warm arm again with another environment's interpreter (an older
              checkout on its PYTHONPATH, say), for a before/after in one run.
Prints medians and minima and their ratios to the baselines. Aim: warm <= 1.15x XProf alone at
the worker's priority (the worker runs at nice 10 on purpose: on a loaded machine a nice 0
baseline measures the priority, not the analysis; both ratios are printed). Then the CPU
seconds of XProf alone and of the warm workers' analyses, which other work on the machine
disturbs far less than wall time: the analysis runs XProf's tools side by side, so with a core
to spare its wall time is near the overview's, and with none it is near its CPU time.

    .venv/bin/python bench/bench_analysis.py [--durations 1 5] [--rounds 5] [--workload ...]
                                             [--also-python PYTHON]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from bench_common import free_port, record, start_job, xprof_alone_with_cpu

from profiler_service.analysis.readers.host_events import read_host_events
from profiler_service.analysis.readers.xplane import CaptureFile
from profiler_service.analysis.readers.xprof_tools import tool_data, tool_names
from profiler_service.analysis.runner.analyzer import XprofAnalyzer
from profiler_service.analysis.runner.warm_workers import WarmWorkers
from profiler_service.analysis.summary import analyse_run
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
    return RemoteCapturer().capture(job).paths


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


def children_cpu_s() -> float:
    """CPU seconds of this process's live children so far (the warm workers)."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


# Each part of one analysis alone, on a fresh copy: the XProf tools the analysis reads beside the
# overview (which reuse the op stats the overview cached), and our own pass over the capture.
PARTS: dict[str, Callable[[list[Path]], object]] = {
    "overview_page": lambda paths: tool_data(paths, "overview_page"),
    "framework_op_stats": lambda paths: tool_data(paths, "framework_op_stats"),
    "input_pipeline_analyzer": lambda paths: tool_data(paths, "input_pipeline_analyzer"),
    "tool list": tool_names,
    "memory_profile": lambda paths: tool_data(paths, "memory_profile"),
    "our pass over the host events": lambda paths: read_host_events(CaptureFile(paths[0])),
}


def print_parts(xplanes: list[Path], root: Path, seconds: float, rounds: int) -> None:
    """CPU seconds (this process) of each part in turn, minima over the rounds, beside one
    whole `analyse_run`: where the analysis's CPU beyond XProf's overview goes."""
    spent: dict[str, list[float]] = {name: [] for name in [*PARTS, "analyse_run (all)"]}
    for i in range(rounds):
        paths = sorted(fresh_copy(xplanes, root, f"parts-{seconds:g}-{i}").glob("*.xplane.pb"))
        for name, part in PARTS.items():
            started = time.process_time()
            part(paths)
            spent[name].append(time.process_time() - started)
        run = fresh_copy(xplanes, root, f"parts-all-{seconds:g}-{i}")
        started = time.process_time()
        analyse_run(run)
        spent["analyse_run (all)"].append(time.process_time() - started)
    base = min(spent["overview_page"])
    print(f"CPU by part, {seconds:g} s capture (min of {rounds}; ÷ overview_page's CPU):")
    for name, values in spent.items():
        print(f"  {name:<32} {min(values):7.3f} s  {min(values) / base:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", type=float, nargs="+", default=[1.0, 5.0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--workload", default="compute-bound", choices=["input-bound", "compute-bound", "eager"]
    )
    parser.add_argument("--also-python", type=Path, help="another environment's interpreter")
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

    cold = XprofAnalyzer(timeout_s=600, workers=WarmWorkers(idle_s=0))
    warm = XprofAnalyzer(timeout_s=600)
    other = XprofAnalyzer(timeout_s=600, python=args.also_python) if args.also_python else None
    runs = {
        "base": lambda run: tool_data(sorted(run.glob("*.xplane.pb")), "overview_page"),
        "nice10": None,  # timed inside its own process
        "full": analyse_run,
        "cold": cold.analyze,
        "warm": warm.analyze,
        **({"other": other.analyze} if other else {}),
    }
    for analyzer in (warm, other):
        if analyzer is not None:
            analyzer.warm()
    try:
        for seconds, xplanes in captures.items():
            size_mb = sum(p.stat().st_size for p in xplanes) / 1e6
            arms: dict[str, list[float]] = {name: [] for name in runs}
            cpu: dict[str, list[float]] = {"nice10": [], "warm": [], "other": []}
            for i in range(args.rounds):
                for name, fn in runs.items():
                    run = fresh_copy(xplanes, root, f"{name}-{seconds:g}-{i}")
                    if fn is None:
                        wall_s, cpu_s = xprof_alone_with_cpu(run)
                        arms[name].append(wall_s)
                        cpu[name].append(cpu_s)
                        continue
                    if name in ("warm", "other"):
                        time.sleep(1)  # as after a capture: the worker is warm and idle
                    before = children_cpu_s()
                    arms[name].append(timed(lambda fn=fn, run=run: fn(run)))
                    if name in cpu:
                        cpu[name].append(children_cpu_s() - before)
            print(f"\n{seconds:g} s capture, {size_mb:.1f} MB: seconds (median / min), ratios")
            print(f"{'arm':<8} {'median':>7} {'min':>7} {'÷ base':>13} {'÷ nice 10':>13}")
            for name, times in arms.items():
                med, low = statistics.median(times), min(times)
                ratios = [
                    f"{med / statistics.median(arms[b]):.2f}/{low / min(arms[b]):.2f}"
                    for b in ("base", "nice10")
                ]
                print(f"{name:<8} {med:>7.3f} {low:>7.3f} {ratios[0]:>13} {ratios[1]:>13}")
            print_parts(xplanes, root, seconds, args.rounds)
            alone = statistics.median(cpu["nice10"])
            for name in ("warm", "other"):
                if cpu[name]:
                    used = statistics.median(cpu[name])
                    print(
                        f"CPU: {name} {used:.3f} s, XProf alone {alone:.3f} s: "
                        f"{used / alone:.2f}x (medians)"
                    )
            record(
                f"analysis, warm worker's CPU / XProf overview_page's CPU, {seconds:g} s capture",
                statistics.median(cpu["warm"]) / alone,
                unit="x",
            )
            w, n = statistics.median(arms["warm"]), statistics.median(arms["nice10"])
            record(
                f"analysis, warm worker / XProf overview_page alone at its priority, {seconds:g} s "
                "capture (medians)",
                w / n,
                "<= 1.15",
                w / n <= 1.15,
                "x",
            )
            record(
                f"analysis, warm worker / overview_page in the benchmark (nice 0), {seconds:g} s "
                "capture (medians)",
                w / statistics.median(arms["base"]),
                unit="x",
            )
    finally:
        for analyzer in (cold, warm, other):
            if analyzer is not None:
                analyzer.close()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{args.rounds} rounds, arms interleaved; ratios median/min; "
        "aim: warm <= 1.15 x nice 10; "
        f"{os.cpu_count()} cores, load " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )


if __name__ == "__main__":
    main()
