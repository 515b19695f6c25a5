"""What the index answers beyond the API's listing: the sidecar's metrics (`StoreTotals`) and a
job's history (the check against it). The fleet hub reads its own index (hub/index/).

Each is one query over the narrow `snapshots` rows (no snapshot.json is parsed), on the
connection and under the lock of the `SnapshotIndex` that made this (index.py).
"""

from __future__ import annotations

import sqlite3
import threading

__all__ = ["SnapshotIndexQueries"]


class SnapshotIndexQueries:
    """The aggregate and row queries of one index; answers `StoreTotals`."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock):
        self._conn, self._lock = conn, lock

    def totals_by_status(self) -> list[tuple[str, int, int, int]]:
        """(status, snapshots, bytes, pinned) per status: one aggregate query, no JSON read.

        Snapshots other sidecars put in a shared bucket (location `remote`) are theirs to export.
        """
        with self._lock:
            return self._conn.execute(
                "SELECT status, count(*), coalesce(sum(size_bytes), 0), coalesce(sum(pinned), 0) "
                "FROM snapshots WHERE location != 'remote' GROUP BY status"
            ).fetchall()

    def latest_ready(self) -> dict[str, tuple[str, str]]:
        """{target: (id, created_at)} of each target's newest ready snapshot (index only)."""
        with self._lock:
            rows = self._conn.execute(
                # SQLite fills bare columns from the row that holds max(created_at).
                "SELECT target, id, max(created_at) FROM snapshots "
                "WHERE status = 'ready' AND location != 'remote' GROUP BY target"
            ).fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def doc(self, snapshot_id: str) -> str | None:
        """The stored snapshot.json text, unparsed."""
        with self._lock:
            row = self._conn.execute("SELECT doc FROM docs WHERE id = ?", (snapshot_id,)).fetchone()
        return row[0] if row else None

    def job_history(
        self,
        namespace: str | None,
        workload: str | None,
        target: str,
        before: str,
        limit: int = 20,
    ) -> list[tuple[str, bool]]:
        """(id, whether it raised findings) of the job's ready snapshots created before
        `before` (ISO), newest first: a job is (namespace, workload, target), as the fleet
        counts it, whichever pod took them."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, rules != '' FROM snapshots WHERE status = 'ready' AND target = ? "
                "AND coalesce(namespace, '') = ? AND coalesce(workload, '') = ? "
                "AND created_at < ? ORDER BY created_at DESC, id DESC LIMIT ?",
                (target, namespace or "", workload or "", before, limit),
            ).fetchall()
        return [(r[0], bool(r[1])) for r in rows]
