"""Hub replicas on a shared fleet index share their registries through its `sidecars` table,
not the bucket (peers.py does that for replicas that each keep their own index).

Each replica writes a row per sidecar whose heartbeat it received (only when that heartbeat is
newer than the row: the freshest word on a sidecar wins, whoever heard it) and a row per
deregistration, at once when a sidecar joins or leaves and every few seconds otherwise; and reads
the rows the others changed since its last read. The replica that syncs the bucket also writes
the records sidecars put there themselves (`hub_register_in_bucket`, replica `bucket`). A
replica that starts reads the table, never the bucket: it knows the fleet before its first
request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import sqlalchemy as sa
from pydantic import ValidationError

from profiler_service.hub.index.database import FleetDatabase
from profiler_service.hub.index.schema import sidecars
from profiler_service.hub.peers import SHARE_INTERVAL_S, STALE_FILE_TTLS
from profiler_service.hub.registry import SidecarRegistry
from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.sidecar_record import SidecarRecord

__all__ = ["BUCKET_REPLICA", "RegistryTable"]

log = logging.getLogger(__name__)

BUCKET_REPLICA = "bucket"  # the rows of records sidecars wrote into the bucket
READ_SLACK_S = 10.0  # rows read again before the newest seen: replicas' clocks and commits


class RegistryTable(LoopOwner):
    """One `BackgroundLoop`, as `RegistryShare`: `once()` publishes and merges; `start()` runs
    one round, then the loop."""

    def __init__(
        self,
        db: FleetDatabase,
        registry: SidecarRegistry,
        replica: str,
        clock: Callable[[], float] = time.time,
    ):
        self.db = db
        self.registry = registry
        self.replica = replica
        self._clock = clock
        self._insert = db.insert
        self.interval_s = min(SHARE_INTERVAL_S, registry.ttl_s / 4)
        self.failures_total = 0
        self.merged_total = 0
        self._published: dict[str, float] = {}  # key -> the seen_at last written
        self._newest_read = -float("inf")
        self._failing = False
        self._loop = BackgroundLoop(
            "hub-peers", self._round, wake=registry.changed, wait_first=self.interval_s, join_s=10
        )

    def once(self) -> None:
        try:
            self.registry.changed.clear()
            self.publish()
            self.merge()
        except sa.exc.SQLAlchemyError as exc:  # the database is down: route with what is known
            self.failures_total += 1
            if not self._failing:
                log.warning("could not share the registry through %r: %s", self.db, exc)
            self._failing = True
            return
        if self._failing:
            log.info("sharing the registry through %r again", self.db)
        self._failing = False

    def publish(self) -> None:
        """What this replica heard since it last wrote, and its deregistrations."""
        heard, removed = self.registry.heard_here()
        fresh = [(r, seen) for r, seen in heard if self._published.get(r.key) != seen]
        self.write(fresh, self.replica)
        rows = [
            {"key": k, "replica": self.replica, "record": None, "seen_at": when, "removed_at": when}
            for k, when in removed.items()
            if self._published.get(k) != -when
        ]
        self._upsert(rows)
        self._published.update({k: -when for k, when in removed.items()})
        horizon = self._clock() - STALE_FILE_TTLS * self.registry.ttl_s
        with self.db.begin() as conn:
            conn.execute(sa.delete(sidecars).where(sidecars.c.seen_at < horizon))

    def write(self, records: Iterable[tuple[SidecarRecord, float]], replica: str) -> None:
        """Rows for these records (seen at when), unless a row holds a fresher word."""
        rows = [
            {
                "key": r.key,
                "replica": replica,
                "record": r.model_dump_json(exclude={"last_seen", "via"}),
                "seen_at": seen,
                "removed_at": None,
            }
            for r, seen in records
        ]
        self._upsert(rows)
        self._published.update({r["key"]: r["seen_at"] for r in rows if replica == self.replica})

    def _upsert(self, rows: list[dict]) -> None:
        if not rows:
            return
        stmt = self._insert(sidecars).values(rows)
        columns = {c: stmt.excluded[c] for c in ("replica", "record", "seen_at", "removed_at")}
        with self.db.begin() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["key"],
                    set_=columns,
                    where=sidecars.c.seen_at <= stmt.excluded.seen_at,
                )
            )

    def merge(self) -> int:
        """The rows the other replicas changed since the last read; how many were live."""
        horizon = self._clock() - self.registry.ttl_s
        query = sa.select(
            sidecars.c.key, sidecars.c.replica, sidecars.c.record, sidecars.c.seen_at
        ).where(
            sidecars.c.seen_at >= max(horizon, self._newest_read - READ_SLACK_S),
            sidecars.c.replica != self.replica,
        )
        with self.db.connect() as conn:
            rows = conn.execute(query).all()
        merged = 0
        for key, replica, record, seen in rows:
            self._newest_read = max(self._newest_read, seen)
            if record is None:
                namespace, _, name = key.partition("/")
                self.registry.remove(name, namespace or None, seen)
                continue
            try:
                parsed = SidecarRecord.model_validate_json(record)
            except ValidationError as exc:
                log.warning("skipping the registry row of %s: %s", key, exc)
                continue
            via = "bucket" if replica == BUCKET_REPLICA else "peer"
            self.registry.heartbeat(parsed.model_copy(update={"via": via}), seen)
            merged += 1
        self.merged_total += merged
        return merged

    def start(self) -> None:
        self.once()  # know the fleet before the first request
        self._loop.start()

    def _round(self) -> float:
        self.once()
        return self.interval_s
