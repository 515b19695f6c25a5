"""SQLite index of snapshots: fast listing and filtering, always rebuildable from snapshot.json.

`SnapshotIndex` opens (or rebuilds) it, writes it and answers the API's listing; the queries
the metrics, the fleet and a job's history ask are `SnapshotIndex.queries` (index_queries.py).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from profiler_service.analysis.gpu_waste import capture_waste
from profiler_service.models import Snapshot
from profiler_service.store.index_queries import SnapshotIndexQueries

log = logging.getLogger(__name__)

# 2: pod, namespace, findings (rule:severity), step time, bottleneck (the fleet hub);
# 3: workload (a job is its workload, not its target's name);
# 4: gpu_waste (what the fleet ledger reads of a capture: analysis/gpu_waste.py)
_SCHEMA_VERSION = 4
_SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY,
    location TEXT NOT NULL,
    status TEXT NOT NULL,
    target TEXT NOT NULL,
    trigger TEXT NOT NULL,
    rules TEXT NOT NULL,
    findings TEXT NOT NULL,  -- rule:severity ...
    pod TEXT,
    namespace TEXT,
    step_time_ms REAL,
    bottleneck TEXT,
    created_at TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    pinned INTEGER NOT NULL,
    doc_mtime_ns INTEGER NOT NULL,
    workload TEXT,
    gpu_waste TEXT  -- CaptureWaste as JSON; NULL: no GPU ran a kernel, or not analysed
);
-- The snapshot.json texts apart: filters and counts scan the narrow rows above only.
CREATE TABLE IF NOT EXISTS docs (id TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS snapshots_created ON snapshots (created_at DESC);
-- Covering indexes for the metrics scrape: totals by status, newest ready snapshot per target.
CREATE INDEX IF NOT EXISTS snapshots_status_totals ON snapshots (status, size_bytes, pinned);
CREATE INDEX IF NOT EXISTS snapshots_status_target ON snapshots (status, target, created_at, id);
-- The fleet's listings, filtered by namespace or target, newest first.
CREATE INDEX IF NOT EXISTS snapshots_namespace ON snapshots (namespace, created_at);
CREATE INDEX IF NOT EXISTS snapshots_target ON snapshots (target, created_at);
"""


def _gpu_waste(snapshot: Snapshot) -> str | None:
    waste = capture_waste(snapshot.summary, snapshot.findings)
    return waste.model_dump_json(exclude_defaults=True) if waste else None


@dataclass(frozen=True)
class IndexEntry:
    id: str
    location: str
    created_at: str
    size_bytes: int
    pinned: bool
    doc_mtime_ns: int


@dataclass(frozen=True)
class SnapshotQuery:
    status: str | None = None
    trigger: str | None = None
    target: str | None = None
    rule: str | None = None
    severity: str | None = None  # snapshots with a finding of this severity
    pod: str | None = None
    namespace: str | None = None
    # A tenant's reach (api/tenants.py): only these namespaces; None: every one.
    namespaces: frozenset[str] | None = None
    workload: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 50
    offset: int = 0
    # Keyset paging: only snapshots older than this (created_at, id), the previous page's last.
    before: tuple[datetime, str] | None = None


class SnapshotIndex:
    """One connection shared by the service's threads, serialised by a lock."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._conn = self._connect()
        # What the metrics, the fleet and a job's history ask: the same connection and lock.
        self.queries = SnapshotIndexQueries(self._conn, self._lock)

    def _connect(self) -> sqlite3.Connection:
        try:
            return self._open()
        except sqlite3.DatabaseError as exc:
            log.warning(
                "index %s is unreadable (%s); rebuilding it from snapshot.json files",
                self.path,
                exc,
            )
            try:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
                return self._open()
            except (OSError, sqlite3.Error) as again:
                # A read-only store: keep serving what it holds, from an index in memory.
                log.error(
                    "index %s cannot be written (%s); keeping it in memory, rebuilt from "
                    "snapshot.json files (the store is read-only: captures are refused)",
                    self.path,
                    again,
                )
                return self._open(":memory:")

    def _open(self, path: Path | str | None = None) -> sqlite3.Connection:
        conn = sqlite3.connect(path or self.path, check_same_thread=False, isolation_level=None)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, _SCHEMA_VERSION):
                conn.execute("DROP TABLE IF EXISTS snapshots")
                conn.execute("DROP TABLE IF EXISTS docs")
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("SELECT count(*) FROM snapshots").fetchone()
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def upsert(
        self, snapshot: Snapshot, *, location: str, size_bytes: int, doc_mtime_ns: int
    ) -> None:
        self.upsert_many([(snapshot, location, size_bytes, doc_mtime_ns)])

    def upsert_many(self, items: Iterable[tuple[Snapshot, str, int, int]]) -> None:
        """(snapshot, location, size_bytes, doc_mtime_ns) each, in one transaction."""
        items = list(items)
        rows = [
            (
                snapshot.id,
                location,
                snapshot.status.value,
                snapshot.target,
                snapshot.trigger.kind.value,
                " ".join(sorted({f.rule for f in snapshot.findings})),
                " ".join(sorted({f"{f.rule}:{f.severity.value}" for f in snapshot.findings})),
                snapshot.pod,
                snapshot.namespace,
                snapshot.summary.step_time.avg_ms if snapshot.summary else None,
                snapshot.summary.bottleneck if snapshot.summary else None,
                snapshot.created_at.isoformat(),
                size_bytes,
                int(snapshot.pinned),
                doc_mtime_ns,
                snapshot.workload,
                _gpu_waste(snapshot),
            )
            for snapshot, location, size_bytes, doc_mtime_ns in items
        ]
        docs = [(snapshot.id, snapshot.model_dump_json()) for snapshot, *_ in items]
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                marks = ",".join("?" * 17)
                self._conn.executemany(f"INSERT OR REPLACE INTO snapshots VALUES ({marks})", rows)
                self._conn.executemany("INSERT OR REPLACE INTO docs VALUES (?,?)", docs)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def remove(self, snapshot_id: str) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM snapshots WHERE id = ?", (snapshot_id,))
            self._conn.execute("DELETE FROM docs WHERE id = ?", (snapshot_id,))

    def get(self, snapshot_id: str) -> Snapshot | None:
        with self._lock:
            row = self._conn.execute("SELECT doc FROM docs WHERE id = ?", (snapshot_id,)).fetchone()
        return Snapshot.model_validate_json(row[0]) if row else None

    def entries(self) -> dict[str, IndexEntry]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, location, created_at, size_bytes, pinned, doc_mtime_ns FROM snapshots"
            ).fetchall()
        return {r[0]: IndexEntry(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows}

    def query(self, q: SnapshotQuery) -> tuple[list[Snapshot], int]:
        """Newest first, filtered; returns one page and the total that matched."""
        docs, total = self.query_docs(q)
        return [Snapshot.model_validate_json(doc) for doc in docs], total

    def query_docs(self, q: SnapshotQuery) -> tuple[list[str], int]:
        """`query` as the stored snapshot.json texts, unparsed (the listing's fast path)."""
        where, args = [], []
        for column, value in (
            ("status", q.status),
            ("trigger", q.trigger),
            ("target", q.target),
            ("pod", q.pod),
            ("namespace", q.namespace),
            ("workload", q.workload),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if q.namespaces is not None:
            where.append(f"namespace IN ({','.join('?' * len(q.namespaces))})")
            args.extend(sorted(q.namespaces))
        if q.rule is not None:
            where.append("(' ' || rules || ' ') LIKE ?")
            args.append(f"% {q.rule} %")
        if q.severity is not None:
            where.append("(findings || ' ') LIKE ?")
            args.append(f"%:{q.severity} %")
        if q.since is not None:
            where.append("created_at >= ?")
            args.append(q.since.isoformat())
        if q.until is not None:
            where.append("created_at < ?")
            args.append(q.until.isoformat())
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        page_where, page_args = list(where), list(args)
        if q.before is not None:  # the count is of every match; the page starts after `before`
            page_where.append("(created_at, id) < (?, ?)")
            page_args.extend((q.before[0].isoformat(), q.before[1]))
        page_clause = f"WHERE {' AND '.join(page_where)}" if page_where else ""
        with self._lock:
            total = self._conn.execute(f"SELECT count(*) FROM snapshots {clause}", args).fetchone()[
                0
            ]
            rows = self._conn.execute(
                f"SELECT docs.doc FROM (SELECT id, created_at FROM snapshots {page_clause} "
                "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?) AS page "
                "JOIN docs ON docs.id = page.id ORDER BY page.created_at DESC, page.id DESC",
                [*page_args, q.limit, q.offset],
            ).fetchall()
        return [r[0] for r in rows], total
