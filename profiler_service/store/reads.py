"""What the store answers of its snapshots: one by id, the listings, a finished one's files; and,
for what it does not hold locally, the remote reader (events.py), never under the store's lock.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from profiler_service.errors import FileNotFound, SnapshotNotFound
from profiler_service.models import Snapshot, SnapshotStatus, is_snapshot_id
from profiler_service.store.events import REMOTE, StoredSnapshot
from profiler_service.store.index import IndexEntry, SnapshotQuery
from profiler_service.store.layout import FAILED, READY
from profiler_service.store.state import StoreState

__all__ = ["SnapshotReads"]

# A file name used in a bucket path and a header: a plain file name, nothing that climbs.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")


class SnapshotReads:
    """Reads from the index and the snapshots' directories; remote reads through the reader."""

    def __init__(self, state: StoreState):
        self.state = state

    def get(self, snapshot_id: str) -> Snapshot:
        index, remote = self.state.index, self.state.remote
        snapshot = index.get(snapshot_id) if is_snapshot_id(snapshot_id) else None
        if snapshot is None and remote is not None and is_snapshot_id(snapshot_id):
            # another sidecar's, not yet listed here
            snapshot = remote.fetch(snapshot_id) or index.get(snapshot_id)
        if snapshot is None:
            raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
        return snapshot

    def stored(self, snapshot_id: str) -> StoredSnapshot | None:
        state = self.state
        with state.lock:
            entry = state.index.entries().get(snapshot_id)
            snapshot = state.index.get(snapshot_id)
            if entry is None or snapshot is None or entry.location not in (READY, FAILED, REMOTE):
                return None
            if entry.location == REMOTE:
                return StoredSnapshot(snapshot, REMOTE, None)
            directory = state.dir_of(snapshot_id, entry.location)
            files = directory if entry.location == READY else directory / "run"
            return StoredSnapshot(snapshot, entry.location, files)

    def entries(self) -> dict[str, IndexEntry]:
        return self.state.index.entries()

    def job_history(self, snapshot: Snapshot, limit: int) -> list[tuple[str, bool]]:
        return self.state.index.queries.job_history(
            snapshot.namespace,
            snapshot.workload,
            snapshot.target,
            snapshot.created_at.isoformat(),
            limit,
        )

    def list(self, query: SnapshotQuery) -> tuple[list[Snapshot], int]:
        self._listing_requested()
        return self.state.index.query(query)

    def list_docs(self, query: SnapshotQuery) -> tuple[list[str], int]:
        self._listing_requested()
        return self.state.index.query_docs(query)

    def file_path(self, snapshot_id: str, name: str) -> Path:
        snapshot = self.get(snapshot_id)
        if snapshot.status is SnapshotStatus.READY:
            base = self.state.profile_dir / snapshot.id
        else:
            base = self.state.failed_dir / snapshot.id / "run"
        base = base.resolve()
        candidate = (base / name).resolve()
        if (
            name not in {f.name for f in snapshot.files}
            or not candidate.is_relative_to(base)
            or not candidate.is_file()
        ):
            raise FileNotFound(f"snapshot {snapshot_id} has no file {name!r}")
        return candidate

    def remote_file(self, snapshot_id: str, name: str) -> tuple[int, Iterator[bytes]]:
        snapshot = self.get(snapshot_id)
        remote, found = self.state.remote, None
        plain = _PLAIN_NAME.fullmatch(name) and ".." not in name
        if remote is not None and plain and name in {f.name for f in snapshot.files}:
            found = remote.stream(snapshot, name)
        if found is None:
            raise FileNotFound(f"snapshot {snapshot_id} has no file {name!r}")
        return found

    def baseline(self, key: str) -> Snapshot | None:
        snapshot_id = self.state.baselines.get(key)
        if snapshot_id is None:
            return None
        try:
            return self.get(snapshot_id)
        except SnapshotNotFound:
            return None

    def _listing_requested(self) -> None:
        """What is listed from elsewhere is refreshed in the background, if due."""
        if self.state.remote is not None:
            self.state.remote.listing_requested()
