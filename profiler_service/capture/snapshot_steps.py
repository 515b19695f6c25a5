"""Two steps of a capture's snapshot between its trace and its publication, each of which may
fail without failing the snapshot: its lead-up (the minutes before the trace) and its check
against the job's history (what became of the last findings). The pipeline (pipeline.py) runs
them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from profiler_service.across.capture_noise import between_captures_sd
from profiler_service.across.verification import step_change, verify
from profiler_service.lookback.models import CaptureWindow, PendingLeadUp
from profiler_service.models import Snapshot, utcnow
from profiler_service.store import SnapshotStore

__all__ = ["begin_lead_up", "capture_window", "complete_lead_up", "verify_against_history"]

log = logging.getLogger(__name__)


def capture_window(snapshot: Snapshot) -> CaptureWindow:
    """What the lead-up reads of the snapshot (lookback/lead_up.py)."""
    created = snapshot.created_at
    return CaptureWindow(
        started=snapshot.capture_started_at or created,
        end=snapshot.capture_finished_at or utcnow(),
        triggered=min(snapshot.trigger.starts_at or created, created),
        target=snapshot.target,
        labels=dict(snapshot.trigger.labels),
        pod=snapshot.pod,
        namespace=snapshot.namespace,
    )


def begin_lead_up(
    recorder: Callable[[CaptureWindow], PendingLeadUp | None] | None, snapshot: Snapshot
) -> PendingLeadUp | None:
    """The ring's part now (the analysis reads the job's memory from it); Prometheus's part
    runs on beside the analysis."""
    if recorder is None:
        return None
    try:
        pending = recorder(capture_window(snapshot))
        if pending is not None:
            pending.start()  # Prometheus's queries, beside the analysis
    except Exception:  # the lead-up is context: it never fails a capture
        log.exception("could not record the lead-up of snapshot %s", snapshot.id)
        return None
    snapshot.lead_up = pending.now if pending is not None else None
    return pending


def complete_lead_up(snapshot: Snapshot, pending: PendingLeadUp | None) -> None:
    if pending is None:
        return
    try:
        snapshot.lead_up = pending.result()
    except Exception:
        log.exception("could not complete the lead-up of snapshot %s", snapshot.id)


def verify_against_history(store: SnapshotStore, snapshot: Snapshot) -> None:
    """Name the job's previous snapshot, and check the findings of its last one that raised
    any against this one (across/verification.py). A store that cannot be read leaves the
    snapshot unverified, never failed."""
    try:
        history = store.job_history(snapshot)
        if not history:
            return
        snapshot.previous_id = history[0][0]
        earlier_id = next((i for i, found in history if found), None)
        if earlier_id is None:
            return
        earlier = store.get(earlier_id)
    except Exception:
        log.exception("could not read the history of %s's job", snapshot.id)
        return
    between, source = between_captures_sd([earlier, snapshot])
    change = step_change(
        earlier.summary, snapshot.summary, earlier.id + snapshot.id, between, source
    )
    snapshot.verified_against = earlier.id
    snapshot.step_change = change
    snapshot.verification = verify(earlier.findings, snapshot.findings, change, snapshot.summary)
