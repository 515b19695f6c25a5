"""One started capture walked through the pipeline: the workers found, the trace (within its
deadline), the lead-up, the analysis, the check against the job's history, then the store;
every failure stored in the snapshot with a code and a sentence. The controller (controller.py)
decides what starts and runs this on the capture's own thread.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import threading
from collections.abc import Callable

from profiler_service.analysis.models import ProcessCpu, ProcessMemory
from profiler_service.analysis.runner.analyzer import XprofAnalyzer
from profiler_service.capture.answered_by import capture_sources
from profiler_service.capture.capturer import Captured, CaptureFailed, CaptureJob, Capturer
from profiler_service.capture.cost import snapshot_cost
from profiler_service.capture.discovery import resolve_workers
from profiler_service.capture.remote import connect_error
from profiler_service.capture.snapshot_steps import (
    begin_lead_up,
    complete_lead_up,
    verify_against_history,
)
from profiler_service.errors import PipelineFailure, SnapshotErrorCode
from profiler_service.lookback.models import CaptureWindow, LeadUp, PendingLeadUp
from profiler_service.lookback.sources import cpu_cores_available
from profiler_service.models import Snapshot, SnapshotError, SnapshotStatus, utcnow
from profiler_service.store import SnapshotStore
from profiler_service.targets import TargetKind

__all__ = ["CANCEL_GRACE_S", "CPU_SAMPLES", "run_capture"]

log = logging.getLogger(__name__)

CANCEL_GRACE_S = 10.0  # a trace cancelled at its deadline has this long to end and save
CPU_SAMPLES = 10  # the job's CPU use: the median of this many samples before the capture


def run_capture(
    snapshot: Snapshot,
    capturer: Capturer,
    job: CaptureJob,
    *,
    store: SnapshotStore,
    analyzer: XprofAnalyzer,
    lead_up: Callable[[CaptureWindow], PendingLeadUp | None] | None,
    max_workers: int,
) -> None:
    """Take `snapshot` from staged to ready or failed; it never raises (an Exception): what
    went wrong is the failed snapshot's error."""
    pending: PendingLeadUp | None = None
    try:
        target, found = resolve_workers(job.target, max_workers)
        job = dataclasses.replace(job, target=target)
        snapshot.workers = target.workers
        snapshot.capture_started_at = utcnow()
        store.update(snapshot)
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
        pending = begin_lead_up(lead_up, snapshot)
        run_dir = store.adopt_capture(snapshot, [*captured.paths, *captured.side_files])
        in_process = target.kind is TargetKind.IN_PROCESS
        snapshot.sources = capture_sources(
            run_dir, snapshot.files, snapshot.workers, in_process=in_process
        )
        snapshot.status = SnapshotStatus.ANALYZING
        store.update(snapshot)
        analysis = analyzer.analyze(
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
        verify_against_history(store, snapshot)
        store.publish(snapshot)
        log.info("snapshot %s ready (%s)", snapshot.id, snapshot.target)
    except PipelineFailure as exc:  # CaptureFailed, AnalysisFailed (whose files are kept)
        complete_lead_up(snapshot, pending)
        _fail(store, snapshot, exc.code, exc.detail, keep_files=exc.keep_files)
    except Exception as exc:
        log.exception("snapshot %s failed unexpectedly", snapshot.id)
        complete_lead_up(snapshot, pending)
        _fail(
            store,
            snapshot,
            SnapshotErrorCode.INTERNAL_ERROR,
            f"{type(exc).__name__}: {exc}",
            keep_files=False,
        )


def _fail(
    store: SnapshotStore,
    snapshot: Snapshot,
    code: SnapshotErrorCode,
    detail: str,
    *,
    keep_files: bool,
) -> None:
    log.warning("snapshot %s failed: %s: %s", snapshot.id, code, detail)
    snapshot.status = SnapshotStatus.FAILED
    snapshot.error = SnapshotError(code=code, detail=detail)
    try:
        store.fail(snapshot, keep_files=keep_files)
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
