"""What the parts of the snapshot store share (snapshot_store.py): where it lives, its index, and
the one lock every change takes, with the changes told to the listeners once it is released.

No listener is called and no remote read is made while the lock is held (events.py), so a
listener may call the store (and a bucket) freely; the mirror's catalogue may call the store
while it holds its own lock, never the other way round.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from profiler_service.errors import SnapshotNotFound
from profiler_service.models import Snapshot, is_snapshot_id
from profiler_service.store.baselines import BaselineRegistry
from profiler_service.store.events import (
    RemoteReader,
    StoreEvent,
    StoreEventKind,
    StoreListener,
)
from profiler_service.store.index import SnapshotIndex
from profiler_service.store.layout import (
    FAILED,
    READY,
    SNAPSHOT_FILE,
    STAGING,
    dir_size,
    write_json,
)
from profiler_service.store.ownership import StoreOwnership

__all__ = ["LOCAL", "StoreState"]

log = logging.getLogger(__name__)

LOCAL = (READY, FAILED, STAGING)  # locations with a local directory ("remote" has none)


class StoreState:
    """The directories, the index, the lock, the pending events, the holds and the remote reader;
    and the few steps on a snapshot's files and index row every part takes."""

    def __init__(self, root: Path):
        self.root = Path(root).expanduser().resolve()
        self.profile_dir = self.root / "plugins" / "profile"
        self.failed_dir = self.root / "failed"
        self.staging_dir = self.root / ".staging"
        self.lock = threading.RLock()
        self.remote: RemoteReader | None = None  # what is not local is read through it
        self.holds: set[str] = set()  # kept from retention: their copy elsewhere is not made yet
        self.baselines = BaselineRegistry(self.root / "baselines.json")
        self._depth = 0  # nesting of changing() in the thread holding the lock
        self._events: list[StoreEvent] = []  # told to the listeners when the lock is released
        self._listeners: list[StoreListener] = []
        self._index: SnapshotIndex | None = None
        self.owner = StoreOwnership(self.root)  # held from open to close (ownership.py)

    def open_index(self) -> None:
        self._index = SnapshotIndex(self.root / "index.sqlite")

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
        self.owner.release()

    @property
    def index(self) -> SnapshotIndex:
        if self._index is None:
            raise RuntimeError("SnapshotStore.open() was not called")
        return self._index

    def subscribe(self, listener: StoreListener) -> None:
        self._listeners.append(listener)

    # ---- the lock and the events ---------------------------------------------------------

    @contextmanager
    def changing(self) -> Iterator[None]:
        """The store's lock; the changes recorded inside are told once the outermost is left."""
        events: list[StoreEvent] = []
        try:
            with self.lock:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                    if self._depth == 0:
                        events, self._events = self._events, []
        finally:  # the lock is released (even when the change failed half-way): tell what was done
            for event in events:
                for listener in self._listeners:
                    try:
                        listener.store_changed(event)
                    except Exception:  # one listener's bug must not undo the store's change
                        log.exception("store listener %r failed on %s", listener, event.kind)

    def changed(self, kind: StoreEventKind, snapshot: Snapshot, location: str) -> None:
        """Record a change (under the lock); a copy elsewhere is owed for what is still here."""
        if self.remote is not None and kind in (StoreEventKind.PUBLISHED, StoreEventKind.UPDATED):
            self.holds.add(snapshot.id)
        self._events.append(StoreEvent(kind, snapshot.model_copy(), location))

    # ---- a snapshot's files and index row ------------------------------------------------

    def indexed(self, snapshot_id: str) -> Snapshot:
        snapshot = self.index.get(snapshot_id) if is_snapshot_id(snapshot_id) else None
        if snapshot is None:
            raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
        return snapshot

    def dir_of(self, snapshot_id: str, location: str) -> Path:
        return {READY: self.profile_dir, FAILED: self.failed_dir, STAGING: self.staging_dir}[
            location
        ] / snapshot_id

    def write(self, directory: Path, snapshot: Snapshot, location: str) -> None:
        write_json(directory / SNAPSHOT_FILE, snapshot)
        self.index_snapshot(snapshot, directory, location)

    def index_snapshot(self, snapshot: Snapshot, directory: Path, location: str) -> None:
        doc = directory / SNAPSHOT_FILE
        self.index.upsert(
            snapshot,
            location=location,
            size_bytes=dir_size(directory),
            doc_mtime_ns=doc.stat().st_mtime_ns if doc.exists() else 0,
        )

    def remove(self, snapshot_id: str) -> None:
        """Rename away first, so a half-deleted snapshot is never listed, then delete."""
        entry = self.index.entries().get(snapshot_id)
        for location in (entry.location,) if entry and entry.location in LOCAL else LOCAL[:2]:
            directory = self.dir_of(snapshot_id, location)
            if directory.exists():
                trash = self.staging_dir / f".trash-{snapshot_id}"
                os.replace(directory, trash)
                shutil.rmtree(trash, ignore_errors=True)
        self.index.remove(snapshot_id)
        self.baselines.forget(snapshot_id)
