"""The capturer contract: take one bounded trace into a logdir, or fail with a clear reason."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from profiler_service.errors import PipelineFailure, SnapshotErrorCode
from profiler_service.models import CaptureOptions
from profiler_service.targets import Target


@dataclass(frozen=True)
class CaptureJob:
    snapshot_id: str
    target: Target
    logdir: Path  # absolute; the profiler writes <logdir>/plugins/profile/<run>/<host>.xplane.pb
    options: CaptureOptions
    attempts: int
    timeout_s: float
    # Set when the trace must end now: its deadline passed (the controller), or the service is
    # stopping. A capturer that waits out the duration itself waits on this.
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True)
class Captured:
    """What a capture wrote, and when its trace began where that was before the capture was
    asked for (the look-back trace): the snapshot's `lookback_ms`."""

    paths: list[Path]  # the .xplane.pb files
    trace_began: datetime | None = None
    # Files written beside the trace, stored with it: the job's Python stacks (in-process).
    side_files: list[Path] = field(default_factory=list)


class CaptureFailed(PipelineFailure):
    """A capture that produced nothing usable; its partial files are not kept."""


class Capturer(Protocol):
    # False when the capturer cannot honour tracer levels (TF 2.21 in-process ignores them).
    applies_tracer_levels: bool

    def capture(self, job: CaptureJob) -> Captured:
        """Run the trace; return the `.xplane.pb` files written, or raise CaptureFailed."""
        ...


def collect_xplanes(job: CaptureJob) -> Captured:
    """The files the profiler wrote; missing and 0-byte files are failures, not captures."""
    paths = sorted(job.logdir.glob("plugins/profile/*/*.xplane.pb"))
    if not paths:
        raise CaptureFailed(
            SnapshotErrorCode.CAPTURE_FILE_MISSING,
            f"the profiler reported success but wrote no .xplane.pb under {job.logdir}; "
            "the job and "
            "the service must share this directory at the same absolute path",
        )
    empty = [p.name for p in paths if p.stat().st_size == 0]
    if empty:
        raise CaptureFailed(
            SnapshotErrorCode.CAPTURE_EMPTY,
            f"the profiler wrote empty files ({', '.join(empty)}); an XSpace over 2 GB is written "
            "as 0 bytes: capture for a shorter duration or with lower tracer levels",
        )
    return Captured(paths)
