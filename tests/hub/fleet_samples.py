"""Snapshots as sidecars of a fleet leave them in the bucket: varied namespaces, targets, times,
statuses and findings (a plain module, like helpers.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from profiler_service.analysis.models import Finding, Severity, StepTime, Summary
from profiler_service.models import (
    CaptureOptions,
    Snapshot,
    SnapshotError,
    SnapshotFile,
    SnapshotStatus,
)
from profiler_service.store.object_store import ObjectStoreMirror

XPLANE = b"\x0a\x04fake xplane bytes" * 64
NOW = datetime.now(UTC).replace(microsecond=0)


def fleet_snapshot(
    i: int,
    *,
    namespace: str,
    target: str,
    minutes_ago: float,
    step_ms: float = 100.0,
    rules: tuple[tuple[str, Severity], ...] = (),
    status: SnapshotStatus = SnapshotStatus.READY,
    pinned: bool = False,
    with_file: bool = False,
) -> Snapshot:
    created = NOW - timedelta(minutes=minutes_ago)
    snapshot = Snapshot(
        id=f"{created:%Y%m%d-%H%M%S}-{target}-{i:012x}",
        status=status,
        target=target,
        pod=f"{target}-0",
        namespace=namespace,
        capture=CaptureOptions(
            duration_ms=500, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        created_at=created,
        finished_at=created + timedelta(seconds=20),
        pinned=pinned,
        files=[SnapshotFile(name="host.xplane.pb", size_bytes=len(XPLANE))] if with_file else [],
    )
    if status is SnapshotStatus.READY:
        snapshot.summary = Summary(bottleneck="input", step_time=StepTime(count=10, avg_ms=step_ms))
        snapshot.findings = [
            Finding(rule=rule, severity=severity, title=f"{rule} on {target}")
            for rule, severity in rules
        ]
    else:
        snapshot.error = SnapshotError(code="capture_failed", detail="nothing listened")
    return snapshot


def put(mirror: ObjectStoreMirror, snapshot: Snapshot, tmp_dir) -> None:
    """Write one snapshot as a sidecar's mirror does: its files, then snapshot.json."""
    if snapshot.files:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        (tmp_dir / "host.xplane.pb").write_bytes(XPLANE)
        mirror.upload_snapshot(tmp_dir, snapshot)
    else:
        mirror.write_doc(snapshot)
