"""What the syncs write into the fleet index, and what they read back to know what is new: a
snapshot becomes a row of columns and its findings' rows; versions say what to read again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from profiler_service.analysis.gpu_waste import capture_waste
from profiler_service.hub.index.database import FleetDatabase
from profiler_service.hub.index.schema import (
    findings,
    manifests,
    snapshot_counts,
    snapshots,
    sync_state,
)
from profiler_service.models import as_utc
from profiler_service.store.events import RemoteSnapshot
from profiler_service.store.list_items import list_item_json

__all__ = ["IndexWrites", "snapshot_row"]

IN_BATCH = 1000  # ids per `IN (...)`: bounded statements, whatever the listing's size
UPSERT_BATCH = 500  # snapshots a statement: 17 values each, within SQLite's 32,766


def snapshot_row(found: RemoteSnapshot) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The `snapshots` row and the `findings` rows of a snapshot read from the bucket."""
    s = found.snapshot
    created = as_utc(s.created_at)
    waste = capture_waste(s.summary, s.findings)
    row = {
        "id": s.id,
        "location": "ready" if s.status.value == "ready" else "failed",
        "version": found.version,
        "status": s.status.value,
        "target": s.target,
        "trigger": s.trigger.kind.value,
        "pod": s.pod,
        "namespace": s.namespace,
        "workload": s.workload,
        "created_at": created,
        "pinned": s.pinned,
        "step_time_ms": s.summary.step_time.avg_ms if s.summary else None,
        "bottleneck": s.summary.bottleneck if s.summary else None,
        "rules": " ".join(sorted({f.rule for f in s.findings})),
        "findings": " ".join(sorted({f"{f.rule}:{f.severity.value}" for f in s.findings})),
        "gpu_waste": waste.model_dump_json(exclude_defaults=True) if waste else None,
        "item": list_item_json(s),
    }
    pairs = sorted({(f.rule, f.severity.value) for f in s.findings})
    rows = [
        {
            "snapshot_id": s.id,
            "rule": r,
            "severity": sev,
            "created_at": created,
            "namespace": s.namespace,
        }
        for r, sev in pairs
    ]
    return row, rows


class IndexWrites:
    def __init__(self, db: FleetDatabase):
        self.db = db
        self._insert = db.insert

    def upsert(self, found: Iterable[RemoteSnapshot]) -> list[str]:
        """Index these (again), `UPSERT_BATCH` a transaction; the ids written."""
        found, ids = list(found), []
        for first in range(0, len(found), UPSERT_BATCH):
            ids += self._upsert(found[first : first + UPSERT_BATCH])
        return ids

    def _upsert(self, found: list[RemoteSnapshot]) -> list[str]:
        rows, finding_rows = [], []
        for f in found:
            row, more = snapshot_row(f)
            rows.append(row)
            finding_rows.extend(more)
        if not rows:
            return []
        ids = [r["id"] for r in rows]
        with self.db.begin() as conn:
            stmt = self._insert(snapshots).values(rows)
            columns = {c: stmt.excluded[c] for c in rows[0] if c != "id"}
            conn.execute(stmt.on_conflict_do_update(index_elements=["id"], set_=columns))
            conn.execute(sa.delete(findings).where(findings.c.snapshot_id.in_(ids)))
            if finding_rows:
                conn.execute(sa.insert(findings), finding_rows)
        return ids

    def remove(self, ids: Iterable[str]) -> int:
        """Drop these rows (their findings go with them); how many there were."""
        ids, removed = list(ids), 0
        for first in range(0, len(ids), IN_BATCH):
            batch = ids[first : first + IN_BATCH]
            with self.db.begin() as conn:
                conn.execute(sa.delete(findings).where(findings.c.snapshot_id.in_(batch)))
                removed += conn.execute(
                    sa.delete(snapshots).where(snapshots.c.id.in_(batch))
                ).rowcount
        return removed

    def versions(self, ids: Iterable[str] | None = None) -> dict[str, int]:
        """{id: version} of these rows (every row when None)."""
        query = sa.select(snapshots.c.id, snapshots.c.version)
        with self.db.connect() as conn:
            if ids is None:
                return dict(conn.execute(query).tuples().all())
            ids, found = list(ids), {}
            for first in range(0, len(ids), IN_BATCH):
                batch = ids[first : first + IN_BATCH]
                found.update(conn.execute(query.where(snapshots.c.id.in_(batch))).tuples().all())
            return found

    def locate(self, snapshot_id: str) -> tuple[str, int] | None:
        """(location, version) of an indexed snapshot."""
        with self.db.connect() as conn:
            row = conn.execute(
                sa.select(snapshots.c.location, snapshots.c.version).where(
                    snapshots.c.id == snapshot_id
                )
            ).first()
        return (row[0], row[1]) if row else None

    def recount(self) -> None:
        """`snapshot_counts` counted again (after a sync that changed the index)."""
        s = snapshots
        namespace = sa.func.coalesce(s.c.namespace, "")
        counted = sa.select(namespace, s.c.status, sa.func.count()).group_by(namespace, s.c.status)
        with self.db.begin() as conn:
            conn.execute(sa.delete(snapshot_counts))
            conn.execute(
                sa.insert(snapshot_counts).from_select(
                    ["namespace", "status", "snapshots"], counted
                )
            )

    # ---- what the syncs remember --------------------------------------------------------

    def state(self) -> dict[str, str]:
        with self.db.connect() as conn:
            return dict(
                conn.execute(sa.select(sync_state.c.key, sync_state.c.value)).tuples().all()
            )

    def set_state(self, **values: str) -> None:
        if not values:
            return
        rows = [{"key": k, "value": v} for k, v in values.items()]
        stmt = self._insert(sync_state).values(rows)
        with self.db.begin() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["key"], set_={"value": stmt.excluded.value}
                )
            )

    def manifest_versions(self) -> dict[str, int]:
        with self.db.connect() as conn:
            return dict(
                conn.execute(sa.select(manifests.c.path, manifests.c.version)).tuples().all()
            )

    def set_manifest_versions(self, versions: dict[str, int]) -> None:
        """The manifests' versions as read now (the ones gone from the bucket dropped)."""
        with self.db.begin() as conn:
            conn.execute(sa.delete(manifests))
            if versions:
                conn.execute(
                    sa.insert(manifests), [{"path": p, "version": v} for p, v in versions.items()]
                )
