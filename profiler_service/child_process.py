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
from enum import StrEnum
from typing import Any

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


class Ending(StrEnum):
    """How a worker's run ended: what the caller acts on, in place of its exit status."""

    REPORTED = "reported"  # it wrote its result after the marker (`result`)
    FAILED = "failed"  # it reported a failure of its own (`stderr` holds its message)
    EXITED = "exited"  # it exited without a result (`exit_code`)
    KILLED = "killed"  # a signal we did not send ended it (`killed_by`)
    OVER_MEMORY = "over_memory"  # stopped by us for passing max_rss_bytes
    TIMED_OUT = "timed_out"  # stopped by us at its deadline


@dataclass(frozen=True)
class WorkerRun:
    ending: Ending
    result: str | None = None  # what the worker reported after its marker, if it got that far
    stderr: str = ""  # the C++ log: the only place some failures are explained
    peak_rss_bytes: int = 0  # the most it held at any check (every POLL_S)
    pid: int = 0  # the process that ran it
    exit_code: int | None = None  # EXITED
    killed_by: signal.Signals | None = None  # KILLED

    @classmethod
    def exited(cls, returncode: int, **fields: Any) -> WorkerRun:
        """A worker that ended on its own, or by a signal (a negative `returncode`)."""
        if returncode < 0:
            return cls(Ending.KILLED, killed_by=_signal(-returncode), **fields)
        return cls(Ending.EXITED, exit_code=returncode, **fields)

    @property
    def oom_killed(self) -> bool:
        """Killed by SIGKILL, which we did not send: most likely the kernel's OOM killer."""
        return self.ending is Ending.KILLED and self.killed_by is signal.SIGKILL

    def how_it_ended(self) -> str:
        """A few words for a failure's detail: `exit status 1`, `killed by SIGKILL`."""
        if self.ending is Ending.EXITED:
            return f"exit status {self.exit_code}"
        if self.ending is Ending.KILLED and self.killed_by is not None:
            return f"killed by {self.killed_by.name}"
        return self.ending.value.replace("_", " ")


def _signal(number: int) -> signal.Signals | None:
    try:
        return signal.Signals(number)
    except ValueError:
        return None


POLL_S = 0.1  # how often a worker's memory is checked


def run_worker(
    module: str,
    args: list[str],
    marker: str,
    timeout_s: float,
    python: str | None = None,
    max_rss_bytes: int | None = None,
) -> WorkerRun:
    """Run `python -m module *args PARENT_PID` (this interpreter unless `python` names another),
    killed past `timeout_s`, or past `max_rss_bytes` of resident memory, before the kernel's OOM
    killer picks the service; the run says which."""
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
            ending = Ending.OVER_MEMORY if over else Ending.TIMED_OUT
            return WorkerRun(ending, None, stderr, peak, proc.pid)
    result = next(
        (ln[len(marker) :] for ln in reversed(stdout.splitlines()) if ln.startswith(marker)), None
    )
    if result is not None:
        return WorkerRun(Ending.REPORTED, result, stderr, peak, proc.pid)
    return WorkerRun.exited(proc.returncode, stderr=stderr, peak_rss_bytes=peak, pid=proc.pid)


def rss_bytes(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def report(marker: str, text: str) -> None:
    """The worker's last word to its parent, on a line of its own."""
    sys.stdout.write(f"\n{marker}{text}\n")
    sys.stdout.flush()
