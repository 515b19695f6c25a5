"""The bucket -> the fleet index loop (index/sync.py does the sync), and what rides with it:
the registration records sidecars write into the bucket (`sidecars/`) and their baselines
(`baselines/`), read by the replica that synced.

On a shared index (PostgreSQL) the other replicas read neither from the bucket: the records
reach them through the registry's table (index/registry_table.py), the baselines through the
sync's state; on SQLite (one index per replica) each replica reads both itself.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from profiler_service.hub.index.registry_table import BUCKET_REPLICA, RegistryTable
from profiler_service.hub.index.sync import IndexSync
from profiler_service.hub.registry import SidecarRegistry
from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.sidecar_record import RECORDS_PREFIX, SidecarRecord
from profiler_service.store.baselines import FleetBaselines
from profiler_service.store.bucket_catalogue import RefreshStats, brief

__all__ = ["FleetSync"]

log = logging.getLogger(__name__)


class FleetSync(LoopOwner):
    """What the metrics read (hub/metrics.py `SyncState`): this replica's syncs, their
    failures, the last one it ran; `version` changes whenever any replica's sync changed the
    index (the fleet view's cache key)."""

    def __init__(
        self,
        index: IndexSync,
        registry: SidecarRegistry,
        interval_s: float,
        table: RegistryTable | None = None,
    ):
        self.index = index
        self.bucket = index.bucket
        self.registry = registry
        self.table = table  # the registry's table, on a shared index
        self.baselines = FleetBaselines(self.bucket)
        self.baseline_ids: frozenset[str] = frozenset()
        self.interval_s = interval_s
        self.syncs_total = 0
        self.failures_total = 0
        self.version = "0"
        self.last: RefreshStats | None = None
        self.last_success_s: float | None = None
        self.first_done = threading.Event()
        # called after each round of the loop: the metrics build what the next scrape reads
        self.after_round: list[Callable[[], None]] = []
        self._loop = BackgroundLoop("fleet-sync", self._round, join_s=30)

    def once(self, *, force: bool = False) -> RefreshStats | None:
        stats = self.index.refresh(force=force)
        if stats is None:
            self.syncs_total += 1
            self.failures_total += 1
        elif stats.skipped is None:
            self.syncs_total += 1
            self.last, self.last_success_s = stats, time.time()
            log.info(
                "fleet sync: %d snapshots listed (%s), %d indexed, %d dropped in %.2f s "
                "(listing %.2f s, reading %.2f s; %d from %d manifests)",
                stats.listed, "whole bucket" if stats.full else "since the cursor",
                stats.indexed, stats.removed, stats.duration_s, stats.listed_s, stats.read_s,
                stats.from_manifests, stats.manifests,
            )  # fmt: skip
            self.read_registrations()
            self.read_baselines()
        self._read_state()
        self.first_done.set()
        return stats

    def read_baselines(self) -> None:
        try:
            self.baselines.refresh()
        except Exception as exc:
            log.warning("could not read the baselines from %s: %s", self.bucket.url, brief(exc))
            return
        self.index.writes.set_state(baselines=json.dumps(sorted(self.baselines.ids)))

    def read_registrations(self) -> None:
        """Registration records sidecars wrote into the bucket (hub_register_in_bucket)."""
        try:
            docs = self.bucket.read_records(RECORDS_PREFIX)
        except Exception as exc:
            log.warning("could not read sidecar records from %s: %s", self.bucket.url, brief(exc))
            return
        records = []
        for path, data in docs.items():
            try:
                record = SidecarRecord.model_validate_json(data)
            except ValueError as exc:
                log.warning("skipping sidecar record %s: %s", path, exc)
                continue
            seen = record.last_seen.timestamp() if record.last_seen else 0.0
            self.registry.heartbeat(record.model_copy(update={"via": "bucket"}), seen)
            records.append((record, seen))
        if self.table is not None:
            self.table.write(records, BUCKET_REPLICA)

    def _read_state(self) -> None:
        """What any replica's sync left: the index's version and the baselines."""
        try:
            state = self.index.writes.state()
        except Exception as exc:
            log.warning("could not read the sync's state from %r: %s", self.index.db, brief(exc))
            return
        self.version = state.get("changes", "0")
        self.baseline_ids = frozenset(json.loads(state.get("baselines", "[]")))

    def _round(self) -> float:
        self.once()
        for call in self.after_round:
            call()
        return self.interval_s
