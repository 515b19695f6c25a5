"""What the benchmarks share: free loopback ports, a real training job to measure, a real
sidecar beside it, and how its processes are told apart and weighed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_job(port: int, workload: str, seconds: float = 1200) -> subprocess.Popen:
    """`profiler_service.demo.job` with its profiler server on `port`; returns once it trains."""
    job = subprocess.Popen(
        [
            *(sys.executable, "-m", "profiler_service.demo.job", "--workload", workload),
            *("--profiler-port", str(port), "--seconds", str(seconds)),
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
    if "analysis.worker" in cmdline:
        return "analysis"
    return "capture" if "remote_child" in cmdline else "other"
