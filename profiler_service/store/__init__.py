"""Snapshot store: TensorBoard/XProf log layout on disk, with a rebuildable SQLite index."""

from profiler_service.store.index import SnapshotQuery
from profiler_service.store.snapshot_store import SnapshotStore

__all__ = ["SnapshotQuery", "SnapshotStore"]
