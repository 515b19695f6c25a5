"""Snapshots as sidecars of a fleet leave them in the bucket: varied namespaces, targets, times,
statuses and findings; and a sidecar's environment for a hub (a plain module, like helpers.py)."""

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
from profiler_service.store.bucket_client import BucketClient

XPLANE = b"\x0a\x04fake xplane bytes" * 64
HUB_TOKEN = "fleet-secret"
NOWHERE = "grpc://127.0.0.1:1"  # nothing listens: every capture fails at once
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
    workload: str | None = None,
    pod: str | None = None,
) -> Snapshot:
    created = NOW - timedelta(minutes=minutes_ago)
    snapshot = Snapshot(
        id=f"{created:%Y%m%d-%H%M%S}-{target}-{i:012x}",
        status=status,
        target=target,
        pod=pod or f"{target}-0",
        namespace=namespace,
        workload=workload,
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


def put(mirror: BucketClient, snapshot: Snapshot, tmp_dir) -> None:
    """Write one snapshot as a sidecar's mirror does: its files, then snapshot.json."""
    if snapshot.files:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        (tmp_dir / "host.xplane.pb").write_bytes(XPLANE)
        mirror.upload_snapshot(tmp_dir, snapshot)
    else:
        mirror.write_doc(snapshot)


def sidecar_env(
    hub_url: str, pod: str, namespace: str, workload: str | None = None
) -> dict[str, str]:
    """A `profiler-service serve` that registers with the hub every half second."""
    env = {
        "PROFILER_HUB_URL": hub_url,
        "PROFILER_HUB_TOKEN": HUB_TOKEN,
        "PROFILER_HUB_HEARTBEAT_S": "0.5",
        "PROFILER_POD_NAME": pod,
        "PROFILER_POD_NAMESPACE": namespace,
        "PROFILER_WEBHOOK_TOKEN": "sidecar-own-token",
        "PROFILER_WEBHOOK_MIN_INTERVAL_S": "0",
        "PROFILER_CAPTURE_ATTEMPTS": "1",
    }
    return {**env, "PROFILER_WORKLOAD": workload} if workload else env
