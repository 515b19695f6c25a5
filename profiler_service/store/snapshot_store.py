"""Snapshots on disk in the TensorBoard/XProf layout; a snapshot appears only when complete.

    STORE/plugins/profile/<id>/<host>.xplane.pb   ready: every XProf/TensorBoard lists it as a run
    STORE/plugins/profile/<id>/snapshot.json
    STORE/failed/<id>/snapshot.json               failed or interrupted (files kept under run/)
    STORE/.staging/<id>/snapshot.json             in flight: capture/ is the profiler's logdir,
    STORE/.staging/<id>/run/                      run/ the adopted files being analysed
    STORE/index.sqlite                            cache of every snapshot.json
    STORE/.owner                                  locked by the one process that writes the store
    STORE/.mirror/<id>.upload|.delete             the bucket mirror's own queue (mirror_sync.py)

Files and names: layout.py; who may write it (one process, by a lock): ownership.py; what a
restart recovers and re-indexes: recovery.py. `SnapshotStore` is the one entry point; its parts:
staging.py (the way in: begin, publish, fail), reads.py (get, list, files, remote reads),
changes.py (delete, pin, baselines, retention, the remote listing), over state.py (the
directories, the index, the one lock and the events).

The profiler itself always writes `<logdir>/plugins/profile/<run>/`, so XProf could list a
staging capture only between the profiler saving its file and `adopt_capture` moving it (moments);
analysis and everything after happen outside any `plugins/profile` path. Publishing is one
directory rename on the same filesystem.

With a mirror (`PROFILER_STORE_URL`, see mirror_sync.py) every finished snapshot is also copied to
an object store in the same layout, and snapshots other sidecars put there are listed as well. The
store never calls the bucket: it tells its listeners what happened once its lock is released, and
reads what it does not hold through a `RemoteReader`, outside its lock (events.py is the seam).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from profiler_service.models import Snapshot
from profiler_service.store.baselines import BaselineRegistry
from profiler_service.store.changes import SnapshotChanges
from profiler_service.store.events import (
    RemoteReader,
    RemoteSnapshot,
    StoredSnapshot,
    StoreListener,
)
from profiler_service.store.index import IndexEntry, SnapshotIndex, SnapshotQuery
from profiler_service.store.queries import StoreTotals
from profiler_service.store.reads import SnapshotReads
from profiler_service.store.staging import Staging
from profiler_service.store.state import StoreState

__all__ = ["SnapshotStore"]


class SnapshotStore:
    """The store's one entry point; each method hands off to the part that does it: the way in
    (staging.py), the reads (reads.py), the changes (changes.py), over what they share
    (state.py: the directories, the index, the lock and the events told after it)."""

    def __init__(
        self,
        root: Path,
        *,
        max_count: int = 200,
        max_bytes: int = 20 * 1024**3,
    ):
        self._state = state = StoreState(root)
        self.root, self.profile_dir = state.root, state.profile_dir
        self.failed_dir, self.staging_dir = state.failed_dir, state.staging_dir
        self.baselines: BaselineRegistry = state.baselines
        self._reads = SnapshotReads(state)
        self._changes = SnapshotChanges(
            state, self._reads.get, max_count=max_count, max_bytes=max_bytes
        )
        self._staging = Staging(state, evict=self._changes.enforce_retention)

    # ---- what keeps a copy elsewhere (store/mirror_sync.py) --------------------------------

    def subscribe(self, listener: StoreListener) -> None:
        """`listener` hears of every change once the store's lock is released (events.py)."""
        self._state.subscribe(listener)

    def attach_remote(self, reader: RemoteReader) -> None:
        """Snapshots are also kept elsewhere (a bucket): what is not local is read through
        `reader`; each change is held from retention until `release()`d (its copy is made), and
        a snapshot retention evicts stays listed as `remote`, read from there."""
        self._state.remote = reader

    def hold(self, snapshot_id: str) -> None:
        """Keep `snapshot_id` from retention: its copy elsewhere is not made yet."""
        self._changes.hold(snapshot_id)

    def release(self, snapshot_id: str) -> None:
        self._changes.release(snapshot_id)

    def entries(self) -> dict[str, IndexEntry]:
        """Every indexed snapshot's location, size, pin and record version."""
        return self._reads.entries()

    def stored(self, snapshot_id: str) -> StoredSnapshot | None:
        """A finished snapshot and where its files are; None when in flight or unknown."""
        return self._reads.stored(snapshot_id)

    def add_remote(self, found: Iterable[RemoteSnapshot]) -> list[str]:
        """List snapshots held elsewhere (in one transaction); a local copy wins over them.
        Returns the ids indexed."""
        return self._changes.add_remote(found)

    def remove_remote(self, snapshot_ids: Iterable[str]) -> list[str]:
        """Stop listing snapshots gone from elsewhere; local ones stay. Returns the ids dropped."""
        return self._changes.remove_remote(snapshot_ids)

    # ---- lifecycle -------------------------------------------------------------------------

    def open(self, url: str | None = None) -> None:
        """Own the store (StoreOwned when a live process does: ownership.py), create the layout,
        mark what a stopped service left in flight as interrupted, sync the index. `url` is
        where this process answers, told to whoever finds the store owned."""
        self._staging.open(url)

    def close(self) -> None:
        self._state.close()

    @property
    def index(self) -> SnapshotIndex:
        return self._state.index

    # What readers beyond the API ask (store/queries.py): they read nothing else of the index.
    @property
    def totals(self) -> StoreTotals:
        return self._state.index.queries

    def check_writable(self) -> None:
        self._staging.check_writable()

    # ---- the in-flight path: begin -> update -> adopt -> publish | fail --------------------

    def begin(self, snapshot: Snapshot) -> Path:
        """Record a new in-flight snapshot; return the absolute logdir the profiler writes into."""
        return self._staging.begin(snapshot)

    def discard_staging(self, snapshot_id: str) -> None:
        """Forget a snapshot that never started: its staging directory and index row."""
        self._staging.discard(snapshot_id)

    def update(self, snapshot: Snapshot) -> None:
        self._staging.update(snapshot)

    def adopt_capture(self, snapshot: Snapshot, xplane_paths: Iterable[Path]) -> Path:
        """Move the profiler's files out of its `plugins/profile` tree into the staging run dir."""
        return self._staging.adopt_capture(snapshot, xplane_paths)

    def staging_run_dir(self, snapshot_id: str) -> Path:
        return self._staging.run_dir(snapshot_id)

    def publish(self, snapshot: Snapshot) -> Snapshot:
        """Make a ready snapshot visible in one rename, with `snapshot.json` already inside."""
        return self._staging.publish(snapshot)

    def fail(self, snapshot: Snapshot, *, keep_files: bool) -> Snapshot:
        """Move an unfinished snapshot to `failed/`; files are kept only when they are whole."""
        return self._staging.fail(snapshot, keep_files=keep_files)

    # ---- reading ---------------------------------------------------------------------------

    def get(self, snapshot_id: str) -> Snapshot:
        """From the index; an id it lacks is asked of the remote reader (never under the lock)."""
        return self._reads.get(snapshot_id)

    def job_history(self, snapshot: Snapshot, limit: int = 20) -> list[tuple[str, bool]]:
        """The ready snapshots of `snapshot`'s job taken before it, newest first, each with
        whether it raised findings (from the index: no snapshot.json is read)."""
        return self._reads.job_history(snapshot, limit)

    def list(self, query: SnapshotQuery) -> tuple[list[Snapshot], int]:
        """From the index at once; what is listed from elsewhere is refreshed in the background."""
        return self._reads.list(query)

    def list_docs(self, query: SnapshotQuery) -> tuple[list[str], int]:
        """`list` as snapshot.json texts, unparsed (GET /profiles splices them)."""
        return self._reads.list_docs(query)

    def file_path(self, snapshot_id: str, name: str) -> Path:
        """A file of a finished snapshot; anything that would leave its directory is not found."""
        return self._reads.file_path(snapshot_id, name)

    def remote_file(self, snapshot_id: str, name: str) -> tuple[int, Iterator[bytes]]:
        """(size, chunks) of a file of a snapshot held only in the object store."""
        return self._reads.remote_file(snapshot_id, name)

    def baseline(self, key: str) -> Snapshot | None:
        """The baseline snapshot for `key` (see baselines.py); None when none is set or found."""
        return self._reads.baseline(key)

    # ---- changing finished snapshots -------------------------------------------------------

    def delete(self, snapshot_id: str) -> None:
        """Gone locally at once; listeners remove the copies elsewhere (`DELETED`)."""
        self._changes.delete(snapshot_id)

    def set_pinned(self, snapshot_id: str, pinned: bool) -> Snapshot:
        """Pin (kept from retention) or unpin a finished snapshot; its record is rewritten."""
        return self._changes.set_pinned(snapshot_id, pinned)

    def set_baseline(self, snapshot_id: str, key: str) -> Snapshot:
        """Make a ready snapshot the baseline for `key` (see baselines.py); it is pinned."""
        return self._changes.set_baseline(snapshot_id, key)
