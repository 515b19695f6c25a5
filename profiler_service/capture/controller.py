"""The capture controller: the one place that bounds a capture and walks it through the pipeline.

Every trigger (HTTP, webhooks, schedules, the memory watch, the CLI) asks `try_start()`, which
answers started, busy or rejected: the target must be configured, the duration within
[`duration_min_s`, `duration_max_s`] whatever the trigger parsed, one capture at a time per
target. Captures run on worker threads (pipeline.py: a deadline of duration + grace; every
failure stored in the snapshot with a code and a sentence), so callers get the snapshot back at
once and follow it through `capturing -> analyzing -> ready | failed`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from profiler_service import __version__
from profiler_service.analysis.runner.analyzer import XprofAnalyzer
from profiler_service.capture.capturer import CaptureJob, Capturer
from profiler_service.capture.pipeline import run_capture
from profiler_service.config import BoundsSettings, CaptureSettings
from profiler_service.durations import format_seconds
from profiler_service.errors import (
    CaptureBusy,
    InternalError,
    InvalidDuration,
    InvalidRequest,
    ServiceError,
    UnknownTarget,
)
from profiler_service.lookback.models import CaptureWindow, PendingLeadUp
from profiler_service.models import (
    CaptureOptions,
    Snapshot,
    Trigger,
    new_snapshot_id,
)
from profiler_service.store import SnapshotStore
from profiler_service.targets import Target, TargetKind

log = logging.getLogger(__name__)

# How long analysis usually takes after the trace, for Retry-After; a hint, not a bound.
_ANALYSIS_ESTIMATE_S = 5.0


@dataclass(frozen=True)
class CaptureRequest:
    duration_s: float
    target: str | None = None
    host_tracer_level: int | None = None
    python_tracer_level: int | None = None
    device_tracer_level: int | None = None
    trigger: Trigger = field(default_factory=Trigger)


class StartOutcome(StrEnum):
    STARTED = "started"
    BUSY = "busy"  # the target is being captured: `snapshot` is that capture
    REJECTED = "rejected"  # never startable as asked: unknown target, duration out of bounds


@dataclass(frozen=True)
class StartResult:
    outcome: StartOutcome
    snapshot: Snapshot | None = None  # the new capture, or the one running when busy
    error: ServiceError | None = None  # why it did not start: CaptureBusy, InvalidDuration...

    @property
    def started(self) -> bool:
        return self.outcome is StartOutcome.STARTED


def _unexpected(exc: Exception) -> InternalError:
    return InternalError.logged(exc, "the capture could not start", log)


@dataclass
class _Active:
    snapshot: Snapshot
    started_s: float  # the controller's clock
    done: threading.Event


class CaptureController:
    def __init__(
        self,
        capture: CaptureSettings,
        bounds: BoundsSettings,
        store: SnapshotStore,
        capturers: Mapping[TargetKind, Capturer],
        analyzer: XprofAnalyzer,
        *,
        lead_up: Callable[[CaptureWindow], PendingLeadUp | None] | None = None,
        on_finished: Sequence[Callable[[Snapshot], None]] = (),
        clock: Callable[[], float] = time.monotonic,
    ):
        """`lead_up` records the minutes before a capture once its trace is done
        (lookback/lead_up.py), completed beside the analysis; `on_finished` get every finished
        snapshot, ready or failed (metrics, annotations); `clock` (seconds) times the captures
        in flight, for a busy answer's Retry-After."""
        self.capture, self.bounds = capture, bounds
        self.store = store
        self.capturers = capturers
        self.analyzer = analyzer
        self.lead_up = lead_up
        self.on_finished = tuple(on_finished)
        self._clock = clock
        self._lock = threading.Lock()
        self._active: dict[str, _Active] = {}  # by target name
        self._done: dict[str, threading.Event] = {}  # by snapshot id, while in flight

    def resolve_target(self, name: str | None) -> Target:
        target = self.capture.target(name)
        if target is None:
            configured = ", ".join(self.capture.target_names) or "none"
            wanted = f"named {name!r}" if name else "at all"
            raise UnknownTarget(
                f"no target is configured {wanted}; configured targets: {configured} "
                "(targets come from the service's configuration, never from a request)"
            )
        return target

    def start(self, request: CaptureRequest) -> Snapshot:
        """Begin a capture and return its snapshot at once; raise why not (CaptureBusy,
        InvalidDuration, UnknownTarget, InvalidRequest) for callers that answer with errors."""
        result = self.try_start(request)
        if result.error is not None:
            raise result.error
        assert result.snapshot is not None
        return result.snapshot

    def check_duration(self, duration_s: float) -> None:
        """The bounds every capture keeps, whichever trigger asked for it."""
        s = self.bounds
        if not (math.isfinite(duration_s) and s.duration_min_s <= duration_s <= s.duration_max_s):
            raise InvalidDuration(
                f"a capture of {duration_s:g} s is out of bounds: captures last between "
                f"{format_seconds(s.duration_min_s)} and {format_seconds(s.duration_max_s)} "
                "(PROFILER_DURATION_MIN_S, PROFILER_DURATION_MAX_S)"
            )

    def try_start(self, request: CaptureRequest) -> StartResult:
        """Begin a capture and return at once: started (with its snapshot), busy (with the
        capture in the way) or rejected (with the reason).

        Total: it never raises. A store that cannot be written (full, read-only) is rejected
        with `store_not_writable`, anything unexpected with `internal_error`, and nothing of
        the capture is left behind: no staging directory, no target held.
        """
        try:
            target = self.resolve_target(request.target)
            capturer = self.capturers.get(target.kind)
            if capturer is None:
                raise InvalidRequest(f"this service cannot capture {target.kind} targets")
            self.check_duration(request.duration_s)
        except ServiceError as exc:
            return StartResult(StartOutcome.REJECTED, error=exc)
        options = _options(request, capturer, self.capture)
        with self._lock:
            busy = self._active.get(target.name)
            if busy is not None:
                retry_after = self._retry_after_s(busy)
                error = CaptureBusy(
                    f"a capture of target {target.name!r} is already running (snapshot "
                    f"{busy.snapshot.id}); retry in about {retry_after} s",
                    headers={"Retry-After": str(retry_after)},
                    snapshot_id=busy.snapshot.id,
                )
                running = busy.snapshot.model_copy(deep=True)
                return StartResult(StartOutcome.BUSY, snapshot=running, error=error)
            snapshot = _new_snapshot(target, options, request.trigger, self.capture)
            try:
                logdir = self.store.begin(snapshot)
            except ServiceError as exc:
                log.warning("capture of %s not started: %s", target.name, exc.detail)
                return StartResult(StartOutcome.REJECTED, error=exc)
            except Exception as exc:
                log.exception("capture of %s not started", target.name)
                return StartResult(StartOutcome.REJECTED, error=_unexpected(exc))
            active = _Active(snapshot, self._clock(), threading.Event())
            self._active[target.name] = active
            self._done[snapshot.id] = active.done
        try:
            return self._launch(active, capturer, target, logdir, request)
        except Exception as exc:  # no thread to run it (the process is out of threads)
            log.exception("capture %s not started", snapshot.id)
            with self._lock:
                self._active.pop(target.name, None)
                self._done.pop(snapshot.id, None)
            active.done.set()
            self.store.discard_staging(snapshot.id)
            return StartResult(StartOutcome.REJECTED, error=_unexpected(exc))

    def _launch(
        self,
        active: _Active,
        capturer: Capturer,
        target: Target,
        logdir: Path,
        request: CaptureRequest,
    ) -> StartResult:
        snapshot, options, s = active.snapshot, active.snapshot.capture, self.capture
        job = CaptureJob(
            snapshot_id=snapshot.id,
            target=target,
            logdir=logdir,
            options=options,
            attempts=s.attempts,
            timeout_s=request.duration_s + self.bounds.capture_grace_s,
        )
        threading.Thread(
            target=self._run,
            args=(active, capturer, job),
            name=f"capture-{snapshot.id}",
            daemon=True,
        ).start()
        return StartResult(StartOutcome.STARTED, snapshot=snapshot.model_copy(deep=True))

    def wait(self, snapshot_id: str, timeout_s: float | None = None) -> bool:
        """Block until the snapshot is finished (True) or the timeout passes (False)."""
        with self._lock:
            done = self._done.get(snapshot_id)
        return True if done is None else done.wait(timeout_s)

    def max_wait_s(self, duration_s: float) -> float:
        return duration_s + self.bounds.capture_grace_s + self.bounds.analysis_timeout_s + 10

    def drain(self, timeout_s: float) -> list[str]:
        """Wait up to `timeout_s` for captures in flight to finish; return the ids still running."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            pending = dict(self._done)
        for done in pending.values():
            done.wait(max(0.0, deadline - time.monotonic()))
        return [i for i, done in pending.items() if not done.is_set()]

    def in_flight(self) -> list[Snapshot]:
        with self._lock:
            return [a.snapshot.model_copy(deep=True) for a in self._active.values()]

    def _retry_after_s(self, active: _Active) -> int:
        elapsed = self._clock() - active.started_s
        remaining = active.snapshot.capture.duration_ms / 1000 - elapsed + _ANALYSIS_ESTIMATE_S
        return max(1, math.ceil(remaining))

    def _run(self, active: _Active, capturer: Capturer, job: CaptureJob) -> None:
        snapshot = active.snapshot
        try:
            run_capture(
                snapshot,
                capturer,
                job,
                store=self.store,
                analyzer=self.analyzer,
                lead_up=self.lead_up,
                max_workers=self.capture.max_workers,
            )
        finally:
            with self._lock:
                self._active.pop(snapshot.target, None)
                self._done.pop(snapshot.id, None)
            self._notify(snapshot)
            active.done.set()

    def _notify(self, snapshot: Snapshot) -> None:
        for callback in self.on_finished:
            try:
                callback(snapshot.model_copy(deep=True))
            except Exception:
                log.exception("on_finished callback %r failed for %s", callback, snapshot.id)


def _options(request: CaptureRequest, capturer: Capturer, s: CaptureSettings) -> CaptureOptions:
    """The capture's options: the request's tracer levels, else the configured ones."""
    return CaptureOptions(
        duration_ms=round(request.duration_s * 1000),
        host_tracer_level=_pick(request.host_tracer_level, s.host_tracer_level),
        python_tracer_level=_pick(request.python_tracer_level, s.python_tracer_level),
        device_tracer_level=_pick(request.device_tracer_level, s.device_tracer_level),
        include_dataset_ops=s.include_dataset_ops,
        options_applied=capturer.applies_tracer_levels,
    )


def _new_snapshot(
    target: Target, options: CaptureOptions, trigger: Trigger, s: CaptureSettings
) -> Snapshot:
    """A new capture's snapshot: where it runs (pod, namespace, workload), the configured
    labels under the trigger's own."""
    return Snapshot(
        id=new_snapshot_id(target.name),
        target=target.name,
        pod=s.pod_name,
        namespace=s.pod_namespace,
        workload=s.workload,
        workers=target.workers,
        trigger=trigger.model_copy(update={"labels": {**s.labels, **trigger.labels}}),
        capture=options,
        service_version=__version__,
    )


def _pick(requested: int | None, default: int) -> int:
    return default if requested is None else requested
