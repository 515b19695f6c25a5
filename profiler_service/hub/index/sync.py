"""The bucket -> the fleet index, once per fleet: whichever replica holds the lease syncs, and
only when the last sync (any replica's) is older than the interval.

A sync lists only what is new: the ids taken since `LATE_S` before the last sync began (ids
begin with the time they were taken, so on S3 that is one listing from there, `StartAfter`),
and reads the `snapshot.json` files whose version it has not indexed (many at once from the
sidecars' manifests on a first sync). Every `full_interval_s` it lists the whole bucket instead:
that finds what the short listings cannot see (deletions, a snapshot rewritten after it was
taken, one that reached the bucket more than `LATE_S` late). A replica that dies mid-sync leaves
whole batches behind (each one transaction, an upsert: read again, never twice), and its lease
goes with its connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from profiler_service.hub.index.database import FleetDatabase
from profiler_service.hub.index.writes import IndexWrites
from profiler_service.store.bucket_catalogue import (
    MANIFEST_MIN_WANTED,
    REFRESH_BATCH,
    RefreshStats,
    brief,
    parse_remote,
)
from profiler_service.store.bucket_client import BucketClient, RemoteEntry
from profiler_service.store.manifest import ManifestReader

__all__ = ["LATE_S", "IndexSync"]

log = logging.getLogger(__name__)

LATE_S = 900.0  # a snapshot reaching the bucket up to this long after it was taken: found soon


class IndexSync:
    def __init__(
        self,
        db: FleetDatabase,
        bucket: BucketClient,
        *,
        interval_s: float,
        full_interval_s: float,
        clock: Callable[[], float] = time.time,
    ):
        self.db = db
        self.bucket = bucket
        self.writes = IndexWrites(db)
        self.interval_s = interval_s
        self.full_interval_s = full_interval_s
        self._clock = clock

    def refresh(self, *, force: bool = False) -> RefreshStats | None:
        """One sync when this replica holds the lease and none ran within the interval (or
        `force`); what it changed, a skipped `RefreshStats` when another replica's stands,
        None when the bucket or the database failed."""
        try:  # the lease too: the database may be down, or its connection cut mid-sync
            with self.db.lease("sync") as held:
                if not held:
                    return RefreshStats(listed=0, skipped="another replica is syncing")
                return self._sync(force)
        except Exception as exc:
            log.warning("could not sync %s: %s", self.bucket.url, brief(exc))
            return None

    def _sync(self, force: bool) -> RefreshStats:
        state = self.writes.state()
        now = self._clock()
        last = float(state.get("last_sync_at", "-inf"))
        if not force and now - last < self.interval_s * 0.9:
            return RefreshStats(listed=0, skipped="another replica synced within the interval")
        last_full = float(state.get("last_full_at", "-inf"))
        full = "cursor" not in state or now - last_full >= self.full_interval_s
        started = time.monotonic()
        known = self.writes.versions() if full else None  # before listing: what it may drop
        remote = self.bucket.list_snapshots(None if full else state["cursor"])
        stats = RefreshStats(listed=len(remote), listed_s=time.monotonic() - started, full=full)
        if known is None:
            known = self.writes.versions(remote)
        wanted = [e for e in remote.values() if known.get(e.id) != e.version]
        if len(wanted) >= MANIFEST_MIN_WANTED:
            taken = self._from_manifests({e.id: e for e in wanted}, stats)
            wanted = [e for e in wanted if e.id not in taken]
        for first in range(0, len(wanted), REFRESH_BATCH):
            self._read(wanted[first : first + REFRESH_BATCH], stats)
        if full:
            stats.removed = self.writes.remove([i for i in known if i not in remote])
        cursor = datetime.fromtimestamp(now - LATE_S, UTC).strftime("%Y%m%d-%H%M%S")
        values = {"last_sync_at": repr(now), "cursor": cursor}
        if full:
            values["last_full_at"] = repr(now)
        if stats.indexed or stats.removed:  # the fleet view's cache key, on every replica
            values["changes"] = str(int(state.get("changes", "0")) + 1)
            self.writes.recount()
        self.writes.set_state(**values)
        stats.duration_s = time.monotonic() - started
        return stats

    def _read(self, batch: list[RemoteEntry], stats: RefreshStats) -> None:
        started = time.monotonic()
        docs = self.bucket.read_docs(batch)
        stats.read_s += time.monotonic() - started
        found = [f for e in batch if (f := parse_remote(e, docs.get(e.id)))]
        stats.indexed += len(self.writes.upsert(found))

    def _from_manifests(self, wanted: dict[str, RemoteEntry], stats: RefreshStats) -> set[str]:
        """Index what the changed manifests hold of `wanted` at its listed version; the ids."""
        reader = ManifestReader(self.bucket)
        reader.versions = self.writes.manifest_versions()
        taken: set[str] = set()
        for batch in reader.matching(wanted, stats):
            found = [f for entry, doc in batch if (f := parse_remote(entry, doc))]
            indexed = self.writes.upsert(found)
            stats.from_manifests += len(indexed)
            stats.indexed += len(indexed)
            taken.update(indexed)
        self.writes.set_manifest_versions(reader.versions)
        return taken
