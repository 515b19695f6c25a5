"""Helpers for the service's worker processes (capture client, analysis)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to kill this worker when the service dies (even by SIGKILL): no orphans."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def lower_priority(increment: int = 10) -> None:
    """Analysis must not compete with the training step for CPU."""
    with contextlib.suppress(OSError):
        os.nice(increment)


def return_freed_memory() -> None:
    """Hand what the allocator freed back to the kernel (glibc keeps it otherwise): between XProf
    conversions, so that one's peak does not sit under the next, and between analyses, so that
    a warm worker's RSS says what it holds."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@dataclass(frozen=True)
class WorkerRun:
    returncode: int
    result: str | None  # what the worker reported after its marker, if it got that far
    stderr: str  # the C++ log: the only place some failures are explained
    peak_rss_bytes: int = 0  # the most it held at any check (every POLL_S)
    over_memory: bool = False  # stopped by us for passing max_rss_bytes
    pid: int = 0  # the process that ran it


POLL_S = 0.1  # how often a worker's memory is checked


def run_worker(
    module: str,
    args: list[str],
    marker: str,
    timeout_s: float,
    python: str | None = None,
    max_rss_bytes: int | None = None,
) -> WorkerRun | None:
    """Run `python -m module *args PARENT_PID` (this interpreter unless `python` names another);
    None when it ran past `timeout_s` (then killed). Past `max_rss_bytes` of resident memory it
    is killed too, and the run says so, before the kernel's OOM killer picks the service."""
    proc = subprocess.Popen(
        [python or sys.executable, "-m", module, *args, str(os.getpid())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout_s
    peak, over = 0, False
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass  # communicate() keeps what it read so far for the next call
        peak = max(peak, rss_bytes(proc.pid))
        if max_rss_bytes is not None and peak > max_rss_bytes:
            over = True
        if over or time.monotonic() > deadline:
            proc.kill()
            stdout, stderr = proc.communicate()
            if not over:
                return None
            break
    result = next(
        (ln[len(marker) :] for ln in reversed(stdout.splitlines()) if ln.startswith(marker)), None
    )
    return WorkerRun(proc.returncode, None if over else result, stderr, peak, over)


def rss_bytes(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def report(marker: str, text: str) -> None:
    """The worker's last word to its parent, on a line of its own."""
    sys.stdout.write(f"\n{marker}{text}\n")
    sys.stdout.flush()
