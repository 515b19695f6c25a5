"""Helpers for the service's worker processes (capture client, analysis)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

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


@dataclass(frozen=True)
class WorkerRun:
    returncode: int
    result: str | None  # what the worker reported after its marker, if it got that far
    stderr: str  # the C++ log: the only place some failures are explained


def run_worker(
    module: str, args: list[str], marker: str, timeout_s: float, python: str | None = None
) -> WorkerRun | None:
    """Run `python -m module *args PARENT_PID` (this interpreter unless `python` names another);
    None when it ran past `timeout_s` (then killed)."""
    proc = subprocess.Popen(
        [python or sys.executable, "-m", module, *args, str(os.getpid())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    result = next(
        (ln[len(marker) :] for ln in reversed(stdout.splitlines()) if ln.startswith(marker)), None
    )
    return WorkerRun(proc.returncode, result, stderr)


def report(marker: str, text: str) -> None:
    """The worker's last word to its parent, on a line of its own."""
    sys.stdout.write(f"\n{marker}{text}\n")
    sys.stdout.flush()
