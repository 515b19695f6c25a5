"""Helpers for the service's worker processes (capture client, analysis)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

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
