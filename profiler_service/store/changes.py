"""What changes a finished snapshot: delete, pin, a baseline, retention's evictions; and the
snapshots listed from elsewhere (added, dropped) and the holds a copy elsewhere keeps.

Each change is made under the store's lock and recorded there (`StoreState.changed`); its
event is told once the lock is released. A snapshot not listed yet is read from elsewhere
first, outside the lock (`get`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from profiler_service.errors import InvalidRequest, SnapshotBusy
from profiler_service.models import Snapshot, SnapshotStatus
from profiler_service.store.events import REMOTE, RemoteSnapshot, StoreEventKind
from profiler_service.store.layout import FAILED, READY
from profiler_service.store.retention import select_evictions
from profiler_service.store.state import StoreState

__all__ = ["SnapshotChanges"]

log = logging.getLogger(__name__)


class SnapshotChanges:
    """Changes to finished snapshots; `get` reads one by id (a remote one included), and
    retention keeps at most `max_count` local snapshots and `max_bytes` of them."""

    def __init__(
        self,
        state: StoreState,
        get: Callable[[str], Snapshot],
        *,
        max_count: int,
        max_bytes: int,
    ):
        self.state, self.get = state, get
        self.max_count, self.max_bytes = max_count, max_bytes

    # ---- what keeps a copy elsewhere -----------------------------------------------------

    def hold(self, snapshot_id: str) -> None:
        with self.state.lock:
            self.state.holds.add(snapshot_id)

    def release(self, snapshot_id: str) -> None:
        with self.state.lock:
            self.state.holds.discard(snapshot_id)

    def add_remote(self, found: Iterable[RemoteSnapshot]) -> list[str]:
        index = self.state.index
        with self.state.lock:
            indexed = index.entries()
            rows = [
                (r.snapshot, REMOTE, r.snapshot.size_bytes, r.version)
                for r in found
                if (current := indexed.get(r.snapshot.id)) is None or current.location == REMOTE
            ]
            index.upsert_many(rows)
        return [row[0].id for row in rows]

    def remove_remote(self, snapshot_ids: Iterable[str]) -> list[str]:
        index, dropped = self.state.index, []
        with self.state.lock:
            indexed = index.entries()
            for snapshot_id in snapshot_ids:
                entry = indexed.get(snapshot_id)
                if entry is not None and entry.location == REMOTE:
                    index.remove(snapshot_id)
                    dropped.append(snapshot_id)
        return dropped

    # ---- a finished snapshot -------------------------------------------------------------

    def delete(self, snapshot_id: str) -> None:
        state = self.state
        self.get(snapshot_id)  # outside the lock: an id not listed yet is read from remote
        with state.changing():
            snapshot = state.indexed(snapshot_id)
            if snapshot.status.in_flight:
                raise SnapshotBusy(
                    f"snapshot {snapshot_id} is still {snapshot.status}; delete it later"
                )
            state.remove(snapshot_id)
            state.holds.discard(snapshot_id)
            state.changed(StoreEventKind.DELETED, snapshot, "")

    def set_pinned(self, snapshot_id: str, pinned: bool) -> Snapshot:
        self.get(snapshot_id)
        with self.state.changing():
            snapshot = self.state.indexed(snapshot_id)
            if snapshot.status.in_flight:
                raise SnapshotBusy(f"snapshot {snapshot_id} is still {snapshot.status}")
            self._pin(snapshot, pinned)
        return snapshot

    def set_baseline(self, snapshot_id: str, key: str) -> Snapshot:
        self.get(snapshot_id)
        with self.state.changing():
            snapshot = self.state.indexed(snapshot_id)
            if snapshot.status is not SnapshotStatus.READY:
                raise InvalidRequest(
                    f"snapshot {snapshot_id} is {snapshot.status}; only a ready one is a baseline"
                )
            self._pin(snapshot, True)
            self.state.baselines.set(key, snapshot_id)
        return snapshot

    def enforce_retention(self) -> None:
        """Bound the local copies only (a bucket has lifecycle rules); held ones count as pinned.
        Called under the lock, by publishing."""
        state = self.state
        entries = [
            replace(e, pinned=True) if e.id in state.holds else e
            for e in state.index.entries().values()
            if e.location != REMOTE
        ]
        for snapshot_id in select_evictions(
            entries, max_count=self.max_count, max_bytes=self.max_bytes
        ):
            log.info("retention: evicting snapshot %s", snapshot_id)
            snapshot = state.index.get(snapshot_id)
            state.remove(snapshot_id)
            if snapshot is None:
                continue
            location = ""
            if state.remote is not None:  # copied elsewhere: still listed, read from there
                location = REMOTE
                state.index.upsert(
                    snapshot, location=REMOTE, size_bytes=snapshot.size_bytes, doc_mtime_ns=0
                )
            state.changed(StoreEventKind.EVICTED, snapshot, location)

    def _pin(self, snapshot: Snapshot, pinned: bool) -> None:
        state = self.state
        snapshot.pinned = pinned
        entry = state.index.entries().get(snapshot.id)
        if entry is not None and entry.location == REMOTE:
            # Nothing local to rewrite: the record elsewhere is rewritten by a listener.
            state.index.upsert(
                snapshot, location=REMOTE, size_bytes=snapshot.size_bytes, doc_mtime_ns=0
            )
            state.changed(StoreEventKind.UPDATED, snapshot, REMOTE)
            return
        location = READY if snapshot.status is SnapshotStatus.READY else FAILED
        state.write(state.dir_of(snapshot.id, location), snapshot, location)
        state.changed(StoreEventKind.UPDATED, snapshot, location)
