"""The capture controller: the one place that bounds a capture and walks it through the pipeline.

Every trigger (HTTP, webhooks, schedules, the memory watch, the CLI) asks `try_start()`, which
answers started, busy or rejected: the target must be configured, the duration within
[`duration_min_s`, `duration_max_s`] whatever the trigger parsed, one capture at a time per
target. A deadline of duration + grace; every failure stored in the snapshot with a code and a
sentence. Captures run on worker threads, so callers get the snapshot back at once and follow
it through `capturing -> analyzing -> ready | failed`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from profiler_service.analysis.analyzer import XprofAnalyzer
from profiler_service.analysis.models import ProcessCpu, ProcessMemory
from profiler_service.capture.capturer import Captured, CaptureFailed, CaptureJob, Capturer
from profiler_service.capture.cost import snapshot_cost
from profiler_service.capture.discovery import resolve_workers
from profiler_service.capture.remote import connect_error
from profiler_service.capture.snapshot_steps import (
    begin_lead_up,
    complete_lead_up,
    verify_against_history,
)
from profiler_service.config import BoundsSettings, CaptureSettings
from profiler_service.durations import format_seconds
from profiler_service.errors import (
    CaptureBusy,
    InternalError,
    InvalidDuration,
    InvalidRequest,
    PipelineFailure,
    ServiceError,
    SnapshotErrorCode,
    UnknownTarget,
)
from profiler_service.lookback.models import LeadUp, PendingLeadUp
from profiler_service.lookback.sources import cpu_cores_available
from profiler_service.models import (
    CaptureOptions,
    Snapshot,
    SnapshotError,
    SnapshotStatus,
    Trigger,
    new_snapshot_id,
    utcnow,
)
from profiler_service.store import SnapshotStore
from profiler_service.targets import Target, TargetKind

log = logging.getLogger(__name__)

# How long analysis usually takes after the trace, for Retry-After; a hint, not a bound.
_ANALYSIS_ESTIMATE_S = 5.0
CANCEL_GRACE_S = 10.0  # a trace cancelled at its deadline has this long to end and save
CPU_SAMPLES = 10  # the job's CPU use: the median of this many samples before the capture


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
    return InternalError(f"the capture could not start: {type(exc).__name__}: {exc}")


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
        lead_up: Callable[[Snapshot], PendingLeadUp | None] | None = None,
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
        s = self.capture
        options = CaptureOptions(
            duration_ms=round(request.duration_s * 1000),
            host_tracer_level=_pick(request.host_tracer_level, s.host_tracer_level),
            python_tracer_level=_pick(request.python_tracer_level, s.python_tracer_level),
            device_tracer_level=_pick(request.device_tracer_level, s.device_tracer_level),
            include_dataset_ops=s.include_dataset_ops,
            options_applied=capturer.applies_tracer_levels,
        )
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
            trigger = request.trigger.model_copy(
                update={"labels": {**s.labels, **request.trigger.labels}}
            )
            snapshot = Snapshot(
                id=new_snapshot_id(target.name),
                target=target.name,
                pod=s.pod_name,
                namespace=s.pod_namespace,
                workload=s.workload,
                workers=target.workers,
                trigger=trigger,
                capture=options,
            )
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
        pending: PendingLeadUp | None = None
        try:
            target, found = resolve_workers(job.target, self.capture.max_workers)
            job = dataclasses.replace(job, target=target)
            snapshot.workers = target.workers
            snapshot.capture_started_at = utcnow()
            self.store.update(snapshot)
            # No analysis worker is started (XProf imported) while the trace runs: on the job's
            # cores it slowed the traced steps (bench/bench_overhead.py); the analysis starts
            # one after the trace if none is warm.
            captured = _with_deadline(capturer, job)
            snapshot.capture_finished_at = utcnow()
            began = captured.trace_began
            if began is not None:
                snapshot.capture.lookback_ms = max(
                    0, round((snapshot.capture_started_at - began).total_seconds() * 1000)
                )
            pending = begin_lead_up(self.lead_up, snapshot)
            run_dir = self.store.adopt_capture(snapshot, captured.paths)
            snapshot.status = SnapshotStatus.ANALYZING
            self.store.update(snapshot)
            analysis = self.analyzer.analyze(
                run_dir, _process_memory(snapshot.lead_up), _process_cpu(snapshot.lead_up)
            )
            snapshot.summary, snapshot.findings = analysis.summary, analysis.findings
            _note_missing_workers(snapshot)
            if found > len(target.workers):
                snapshot.summary.notes.append(
                    f"{found} workers were discovered; the first {len(target.workers)} were "
                    "captured (PROFILER_CAPTURE_MAX_WORKERS)"
                )
            complete_lead_up(snapshot, pending)
            snapshot.capture.cost = snapshot_cost(snapshot)
            verify_against_history(self.store, snapshot)
            self.store.publish(snapshot)
            log.info("snapshot %s ready (%s)", snapshot.id, snapshot.target)
        except PipelineFailure as exc:  # CaptureFailed, AnalysisFailed (whose files are kept)
            complete_lead_up(snapshot, pending)
            self._fail(snapshot, exc.code, exc.detail, keep_files=exc.keep_files)
        except Exception as exc:
            log.exception("snapshot %s failed unexpectedly", snapshot.id)
            complete_lead_up(snapshot, pending)
            self._fail(
                snapshot,
                SnapshotErrorCode.INTERNAL_ERROR,
                f"{type(exc).__name__}: {exc}",
                keep_files=False,
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

    def _fail(
        self, snapshot: Snapshot, code: SnapshotErrorCode, detail: str, *, keep_files: bool
    ) -> None:
        log.warning("snapshot %s failed: %s: %s", snapshot.id, code, detail)
        snapshot.status = SnapshotStatus.FAILED
        snapshot.error = SnapshotError(code=code, detail=detail)
        try:
            self.store.fail(snapshot, keep_files=keep_files)
        except Exception:
            log.exception("could not record the failure of snapshot %s", snapshot.id)


def _with_deadline(capturer: Capturer, job: CaptureJob) -> Captured:
    """Enforce the deadline even on capturers that block in C++ (the in-process profiler)."""
    result: dict = {}

    def run() -> None:
        try:
            result["captured"] = capturer.capture(job)
        except BaseException as exc:
            result["error"] = exc

    worker = threading.Thread(target=run, name=f"trace-{job.snapshot_id}", daemon=True)
    worker.start()
    worker.join(job.timeout_s + 5)
    if worker.is_alive():
        # Past the deadline: end the trace before the target is freed for the next capture.
        job.cancel.set()
        worker.join(CANCEL_GRACE_S)
        if worker.is_alive():
            log.error("the trace of %s outlived its deadline and its cancellation", job.snapshot_id)
        raise CaptureFailed(
            SnapshotErrorCode.CAPTURE_TIMEOUT,
            f"the capture did not finish within {job.timeout_s:g} s (duration + grace)",
        )
    if "error" in result:
        raise result["error"]
    return result["captured"]


def _process_memory(lead_up: LeadUp | None) -> ProcessMemory | None:
    """The job's RSS and memory limit at the capture's end, from the lead-up: for the memory
    rules, a host allocator's real capacity."""
    if lead_up is None:
        return None
    last = {}
    for series in lead_up.series:
        own = series.source != "prometheus"
        if own and series.labels.get("device") == "host" and series.points:
            last[series.name] = (series.points[-1][1], series.source)
    if "memory_in_use_bytes" not in last or "memory_capacity_bytes" not in last:
        return None
    return ProcessMemory(
        rss_bytes=int(last["memory_in_use_bytes"][0]),
        limit_bytes=int(last["memory_capacity_bytes"][0]),
        source=last["memory_in_use_bytes"][1],
    )


def _process_cpu(lead_up: LeadUp | None) -> ProcessCpu:
    """The job's cores from the lead-up (the median use of its last samples), else this
    service's own host's: a sidecar that does not watch the job shares its node."""
    series = {
        s.name: s
        for s in (lead_up.series if lead_up else [])
        if s.source != "prometheus" and s.labels.get("device") == "host" and s.points
    }
    available = series.get("cpu_cores_available")
    if available is None:
        return ProcessCpu(cores_available=cpu_cores_available(), source="service")
    used = series.get("cpu_cores_used")
    recent = [v for _, v in used.points[-CPU_SAMPLES:]] if used else []
    return ProcessCpu(
        cores_available=available.points[-1][1],
        cores_used=round(statistics.median(recent), 3) if recent else None,
        source=available.source,
    )


def _note_missing_workers(snapshot: Snapshot) -> None:
    """Each worker's profiler names its file <host>_<port>.xplane.pb; say which never wrote one."""
    if len(snapshot.workers) < 2 or snapshot.summary is None:
        return
    written = set(snapshot.hosts)
    missing = [w for w in snapshot.workers if w.replace(":", "_") not in written]
    if missing:
        named = [
            w if connect_error(w) is None else f"{w} (no longer answering: exited or crashed)"
            for w in missing
        ]
        snapshot.summary.notes.append(
            f"{len(missing)} of {len(snapshot.workers)} workers wrote no capture: "
            f"{', '.join(named)}; the analysis covers the others"
        )


def _pick(requested: int | None, default: int) -> int:
    return default if requested is None else requested
