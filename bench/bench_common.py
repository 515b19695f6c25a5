"""What the benchmarks share: free loopback ports, a real training job to measure, a real
sidecar beside it, and how its processes are told apart and weighed."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_job(port: int, workload: str, seconds: float = 1200, *args: str) -> subprocess.Popen:
    """`profiler_service.demo.job` with its profiler server on `port` (and `args`); returns once
    it trains."""
    job = subprocess.Popen(
        [
            *(sys.executable, "-m", "profiler_service.demo.job", "--workload", workload),
            *("--profiler-port", str(port), "--seconds", str(seconds), *args),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert job.stdout is not None
    for line in job.stdout:
        if line.startswith("READY"):
            return job
    raise RuntimeError("job did not start")


def record(
    figure: str, value: float, aim: str = "", met: bool | None = None, unit: str = ""
) -> None:
    """A headline figure for `bench/run`'s table, appended to $BENCH_FIGURES when it is set."""
    path = os.environ.get("BENCH_FIGURES")
    if not path:
        return
    line = {"figure": figure, "value": value, "unit": unit, "aim": aim, "met": met}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


XPROF_ALONE = """
import sys, time
from pathlib import Path
from profiler_service.analysis.readers.xprof_tools import load_xprof, tool_data
load_xprof()
started, cpu = time.perf_counter(), time.process_time()
tool_data(sorted(Path(sys.argv[1]).glob("*.xplane.pb")), "overview_page")
print(time.perf_counter() - started, time.process_time() - cpu)
"""


def xprof_alone(run: Path) -> float:
    """Seconds of XProf's overview_page conversion of a fresh copy of `run` (it caches results
    beside a capture), timed inside a process at the analysis worker's priority (nice 10): the
    conditions the service's own analysis runs in."""
    return xprof_alone_with_cpu(run)[0]


def xprof_alone_with_cpu(run: Path) -> tuple[float, float]:
    """`xprof_alone`'s wall seconds, and the CPU seconds the conversion took."""
    with tempfile.TemporaryDirectory(prefix="bench-xprof-") as tmp:
        for path in sorted(run.glob("*.xplane.pb")):
            shutil.copy(path, Path(tmp) / path.name)
        out = subprocess.run(
            [sys.executable, "-c", XPROF_ALONE, tmp],
            capture_output=True,
            text=True,
            check=True,
            preexec_fn=lambda: os.nice(10),
        )
        wall, cpu = out.stdout.strip().splitlines()[-1].split()
        return float(wall), float(cpu)


def start_service(
    store: Path, target: str, port: int, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`profiler-service serve` (the sidecar) capturing `target`; returns once it answers."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "profiler_service.cli", "--log-level", "WARNING", "serve"),
            *("--store", str(store), "--port", str(port), "--target", target),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PROFILER_ANALYSIS_TIMEOUT_S": "1200", **(env or {})},
    )
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("service did not start")


def rss(proc: psutil.Process) -> int:
    try:
        return proc.memory_info().rss
    except psutil.Error:
        return 0


def role(child: psutil.Process) -> str:
    """What a child of the sidecar is: `analysis` (a warm XProf worker), `capture` (XProf's
    capture client) or `other`."""
    try:
        cmdline = " ".join(child.cmdline())
    except psutil.Error:
        return "other"
    if "analysis.runner.worker" in cmdline:
        return "analysis"
    return "capture" if "remote_child" in cmdline else "other"


def paired_interval(
    arm: list[float], bare: list[float], draws: int = 2000
) -> tuple[float, float, float]:
    """The median of the rounds' arm/bare ratios (each round runs both arms back to back, so
    the ratio cancels what the round shares), its 95 % bootstrap interval's low end and
    half-width; an infinite half-width with fewer than 3 rounds."""
    ratios = [a / b for a, b in zip(arm, bare, strict=False)]
    if len(ratios) < 3:
        return (statistics.median(ratios) if ratios else math.nan), math.nan, math.inf
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    low, high = medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]
    return statistics.median(ratios), low, (high - low) / 2


def add_rounds_arguments(parser, rounds: int, max_rounds: int, what: str) -> None:
    """--rounds, --precision and --max-rounds: at least `rounds` rounds, then more until `what`
    (whose ratio to bare) is known to +-precision."""
    parser.add_argument("--rounds", type=int, default=rounds, help="at least this many rounds")
    parser.add_argument(
        "--precision",
        type=float,
        default=0.0,
        help=f"then keep going until {what} ratio to bare is known to +-this (the 95%% "
        "bootstrap interval's half-width over the rounds' paired ratios), e.g. 0.025 to tell "
        "5%% from noise; 0: exactly --rounds",
    )
    parser.add_argument("--max-rounds", type=int, default=max_rounds, help="bound for --precision")
