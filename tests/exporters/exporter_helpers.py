"""Helpers for the exporter tests: snapshots in a real store (the service is the suite's
`make_service`).

A plain module, not a conftest.py: one here would shadow tests/conftest.py, which the e2e tests
import as `conftest`.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

from profiler_service.models import CaptureOptions, Snapshot, SnapshotStatus, Trigger
from profiler_service.store.snapshot_store import SnapshotStore

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def add_snapshot(
    store: SnapshotStore,
    snapshot_id: str,
    *,
    target: str = "default",
    minutes: int = 0,
    summary: dict | None = None,
    findings: list[dict] | None = None,
    ready: bool = True,
    xplane_bytes: int = 1000,
) -> Snapshot:
    """Walk one snapshot through the store's real begin -> adopt -> publish | fail path."""
    snapshot = Snapshot.model_validate(
        {
            "id": snapshot_id,
            "target": target,
            "trigger": Trigger().model_dump(),
            "capture": CaptureOptions(
                duration_ms=1000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
            ).model_dump(),
            "created_at": T0 + timedelta(minutes=minutes),
            "summary": summary,
            "findings": findings or [],
        }
    )
    logdir = store.begin(snapshot)
    xplane = Path(logdir) / "host.xplane.pb"
    xplane.write_bytes(b"x" * xplane_bytes)
    store.adopt_capture(snapshot, [xplane])
    if ready:
        store.publish(snapshot)
    else:
        snapshot.status = SnapshotStatus.FAILED
        store.fail(snapshot, keep_files=False)
    return snapshot


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
