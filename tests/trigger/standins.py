"""Stand-ins for the trigger tests: a capturer the test releases, and a clock it moves.

The decisions under test (dedupe, cooldown, throttle, busy) depend on whether a capture is still
running, not on what it records; so the capture is held open until the test lets it finish, and
then fails with a stored error code. Real captures of real jobs are in tests/e2e/.
"""

from __future__ import annotations

import threading
from pathlib import Path

from profiler_service.capture.capturer import CaptureFailed, CaptureJob


class HeldCapturer:
    """Each capture blocks until `release()`; then it fails as `target_unreachable`."""

    applies_tracer_levels = True

    def __init__(self) -> None:
        self.started: list[CaptureJob] = []
        self._release = threading.Event()

    def capture(self, job: CaptureJob) -> list[Path]:
        self.started.append(job)
        self._release.wait(60)
        raise CaptureFailed("target_unreachable", "stand-in capturer: released by the test")

    def release(self) -> None:
        self._release.set()


class FakeClock:
    def __init__(self, now_s: float = 1_800_000_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds
