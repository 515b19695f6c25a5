"""Snapshots on disk in the TensorBoard/XProf layout; a snapshot appears only when complete.

    STORE/plugins/profile/<id>/<host>.xplane.pb   ready: every XProf/TensorBoard lists it as a run
    STORE/plugins/profile/<id>/snapshot.json
    STORE/failed/<id>/snapshot.json               failed or interrupted (files kept under run/)
    STORE/.staging/<id>/snapshot.json             in flight: capture/ is the profiler's logdir,
    STORE/.staging/<id>/run/                      run/ the adopted files being analysed
    STORE/index.sqlite                            cache of every snapshot.json
    STORE/.mirror/<id>.upload|.delete             the bucket mirror's own queue (mirror_sync.py)

Files and names: layout.py; what a restart recovers and re-indexes: recovery.py.

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

import contextlib
import logging
import os
import re
import shutil
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from profiler_service.errors import (
    FileNotFound,
    InvalidRequest,
    SnapshotBusy,
    SnapshotNotFound,
    StoreNotWritable,
)
from profiler_service.models import (
    Snapshot,
    SnapshotStatus,
    is_snapshot_id,
    utcnow,
)
from profiler_service.store.baselines import BaselineRegistry
from profiler_service.store.events import (
    REMOTE,
    RemoteReader,
    RemoteSnapshot,
    StoredSnapshot,
    StoreEvent,
    StoreEventKind,
    StoreListener,
)
from profiler_service.store.index import IndexEntry, SnapshotIndex, SnapshotQuery
from profiler_service.store.layout import (
    FAILED,
    READY,
    SNAPSHOT_FILE,
    STAGING,
    dir_size,
    list_files,
    write_json,
)
from profiler_service.store.queries import FleetIndex, StoreTotals
from profiler_service.store.recovery import reconcile_index, recover_interrupted
from profiler_service.store.retention import select_evictions

log = logging.getLogger(__name__)

_DIRS = (READY, FAILED, STAGING)  # locations with a local directory ("remote" has none)


class SnapshotStore:
    def __init__(
        self,
        root: Path,
        *,
        max_count: int = 200,
        max_bytes: int = 20 * 1024**3,
    ):
        self.root = Path(root).expanduser().resolve()
        self.profile_dir = self.root / "plugins" / "profile"
        self.failed_dir = self.root / "failed"
        self.staging_dir = self.root / ".staging"
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._lock = threading.RLock()
        self._depth = 0  # nesting of _changing() in the thread holding the lock
        self._events: list[StoreEvent] = []  # told to the listeners when the lock is released
        self._listeners: list[StoreListener] = []
        self._remote: RemoteReader | None = None
        self._holds: set[str] = set()
        self._index: SnapshotIndex | None = None
        self.baselines = BaselineRegistry(self.root / "baselines.json")

    # ---- what keeps a copy elsewhere (store/mirror_sync.py) --------------------------------

    def subscribe(self, listener: StoreListener) -> None:
        """`listener` hears of every change once the store's lock is released (events.py)."""
        self._listeners.append(listener)

    def attach_remote(self, reader: RemoteReader) -> None:
        """Snapshots are also kept elsewhere (a bucket): what is not local is read through
        `reader`; each change is held from retention until `release()`d (its copy is made), and
        a snapshot retention evicts stays listed as `remote`, read from there."""
        self._remote = reader

    def hold(self, snapshot_id: str) -> None:
        """Keep `snapshot_id` from retention: its copy elsewhere is not made yet."""
        with self._lock:
            self._holds.add(snapshot_id)

    def release(self, snapshot_id: str) -> None:
        with self._lock:
            self._holds.discard(snapshot_id)

    def entries(self) -> dict[str, IndexEntry]:
        """Every indexed snapshot's location, size, pin and record version."""
        return self.index.entries()

    def stored(self, snapshot_id: str) -> StoredSnapshot | None:
        """A finished snapshot and where its files are; None when in flight or unknown."""
        with self._lock:
            entry = self.index.entries().get(snapshot_id)
            snapshot = self.index.get(snapshot_id)
            if entry is None or snapshot is None or entry.location not in (READY, FAILED, REMOTE):
                return None
            if entry.location == REMOTE:
                return StoredSnapshot(snapshot, REMOTE, None)
            directory = self._dir_of(snapshot_id, entry.location)
            files = directory if entry.location == READY else directory / "run"
            return StoredSnapshot(snapshot, entry.location, files)

    def add_remote(self, found: Iterable[RemoteSnapshot]) -> list[str]:
        """List snapshots held elsewhere (in one transaction); a local copy wins over them.
        Returns the ids indexed."""
        with self._lock:
            indexed = self.index.entries()
            rows = [
                (r.snapshot, REMOTE, r.snapshot.size_bytes, r.version)
                for r in found
                if (current := indexed.get(r.snapshot.id)) is None or current.location == REMOTE
            ]
            self.index.upsert_many(rows)
        return [row[0].id for row in rows]

    def remove_remote(self, snapshot_ids: Iterable[str]) -> list[str]:
        """Stop listing snapshots gone from elsewhere; local ones stay. Returns the ids dropped."""
        dropped = []
        with self._lock:
            indexed = self.index.entries()
            for snapshot_id in snapshot_ids:
                entry = indexed.get(snapshot_id)
                if entry is not None and entry.location == REMOTE:
                    self.index.remove(snapshot_id)
                    dropped.append(snapshot_id)
        return dropped

    # ---- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        """Create the layout, mark what a crash left in flight as interrupted, sync the index."""
        try:
            for d in (self.profile_dir, self.failed_dir, self.staging_dir):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreNotWritable(
                f"cannot create the snapshot store at {self.root}: {exc}"
            ) from exc
        self._index = SnapshotIndex(self.root / "index.sqlite")
        with self._changing():
            self._recover_interrupted()
            self._reconcile_index()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()

    @property
    def index(self) -> SnapshotIndex:
        if self._index is None:
            raise RuntimeError("SnapshotStore.open() was not called")
        return self._index

    # What readers beyond the API ask (store/queries.py): they read nothing else of the index.
    @property
    def totals(self) -> StoreTotals:
        return self.index.queries

    @property
    def fleet(self) -> FleetIndex:
        return self.index.queries

    def check_writable(self) -> None:
        probe = self.staging_dir / f".probe-{os.getpid()}-{threading.get_ident()}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StoreNotWritable(
                f"the snapshot store {self.root} is not writable: {exc}"
            ) from exc

    # ---- the in-flight path: begin -> update -> adopt -> publish | fail --------------------

    def begin(self, snapshot: Snapshot) -> Path:
        """Record a new in-flight snapshot; return the absolute logdir the profiler writes into."""
        capture_dir = self.staging_dir / snapshot.id / "capture"
        try:
            capture_dir.mkdir(parents=True)
            # The job's profiler server may run as another user on the shared volume.
            capture_dir.chmod(0o777)
            self._write(self.staging_dir / snapshot.id, snapshot, STAGING)
        except (OSError, sqlite3.Error) as exc:  # a full disk fails the index as well
            self.discard_staging(snapshot.id)
            raise StoreNotWritable(
                f"the snapshot store {self.root} is not writable: {exc}"
            ) from exc
        return capture_dir

    def discard_staging(self, snapshot_id: str) -> None:
        """Forget a snapshot that never started: its staging directory and index row."""
        shutil.rmtree(self.staging_dir / snapshot_id, ignore_errors=True)
        with contextlib.suppress(sqlite3.Error):
            self.index.remove(snapshot_id)

    def update(self, snapshot: Snapshot) -> None:
        self._write(self.staging_dir / snapshot.id, snapshot, STAGING)

    def adopt_capture(self, snapshot: Snapshot, xplane_paths: Iterable[Path]) -> Path:
        """Move the profiler's files out of its `plugins/profile` tree into the staging run dir."""
        run_dir = self.staging_dir / snapshot.id / "run"
        run_dir.mkdir(exist_ok=True)
        for path in xplane_paths:
            os.replace(path, run_dir / path.name)
        shutil.rmtree(self.staging_dir / snapshot.id / "capture", ignore_errors=True)
        snapshot.files = list_files(run_dir)
        return run_dir

    def staging_run_dir(self, snapshot_id: str) -> Path:
        return self.staging_dir / snapshot_id / "run"

    def publish(self, snapshot: Snapshot) -> Snapshot:
        """Make a ready snapshot visible in one rename, with `snapshot.json` already inside."""
        with self._changing():
            staging = self.staging_dir / snapshot.id
            run_dir = staging / "run"
            run_dir.mkdir(exist_ok=True)
            snapshot.status = SnapshotStatus.READY
            snapshot.finished_at = snapshot.finished_at or utcnow()
            snapshot.files = list_files(run_dir)
            write_json(run_dir / SNAPSHOT_FILE, snapshot)
            final = self.profile_dir / snapshot.id
            os.replace(run_dir, final)
            shutil.rmtree(staging, ignore_errors=True)
            self._index_snapshot(snapshot, final, READY)
            self._changed(StoreEventKind.PUBLISHED, snapshot, READY)
            self._enforce_retention()
        return snapshot

    def fail(self, snapshot: Snapshot, *, keep_files: bool) -> Snapshot:
        """Move an unfinished snapshot to `failed/`; files are kept only when they are whole."""
        with self._changing():
            staging = self.staging_dir / snapshot.id
            snapshot.finished_at = snapshot.finished_at or utcnow()
            shutil.rmtree(staging / "capture", ignore_errors=True)
            if not keep_files:
                shutil.rmtree(staging / "run", ignore_errors=True)
            snapshot.files = list_files(staging / "run")
            try:
                staging.mkdir(parents=True, exist_ok=True)
                write_json(staging / SNAPSHOT_FILE, snapshot)
                final = self.failed_dir / snapshot.id
                os.replace(staging, final)
                self._index_snapshot(snapshot, final, FAILED)
                self._changed(StoreEventKind.PUBLISHED, snapshot, FAILED)
                self._enforce_retention()
            except OSError as exc:
                # The store itself is broken (read-only, full): keep the record in the index only.
                log.error("could not record failed snapshot %s on disk: %s", snapshot.id, exc)
                self.index.upsert(snapshot, location=FAILED, size_bytes=0, doc_mtime_ns=0)
        return snapshot

    # ---- reading ---------------------------------------------------------------------------

    def get(self, snapshot_id: str) -> Snapshot:
        """From the index; an id it lacks is asked of the remote reader (never under the lock)."""
        snapshot = self.index.get(snapshot_id) if is_snapshot_id(snapshot_id) else None
        if snapshot is None and self._remote is not None and is_snapshot_id(snapshot_id):
            # another sidecar's, not yet listed here
            snapshot = self._remote.fetch(snapshot_id) or self.index.get(snapshot_id)
        if snapshot is None:
            raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
        return snapshot

    def job_history(self, snapshot: Snapshot, limit: int = 20) -> list[tuple[str, bool]]:
        """The ready snapshots of `snapshot`'s job taken before it, newest first, each with
        whether it raised findings (from the index: no snapshot.json is read)."""
        return self.index.queries.job_history(
            snapshot.namespace,
            snapshot.workload,
            snapshot.target,
            snapshot.created_at.isoformat(),
            limit,
        )

    def list(self, query: SnapshotQuery) -> tuple[list[Snapshot], int]:
        """From the index at once; what is listed from elsewhere is refreshed in the background."""
        if self._remote is not None:
            self._remote.listing_requested()
        return self.index.query(query)

    def list_docs(self, query: SnapshotQuery) -> tuple[list[str], int]:
        """`list` as snapshot.json texts, unparsed (GET /profiles splices them)."""
        if self._remote is not None:
            self._remote.listing_requested()
        return self.index.query_docs(query)

    def file_path(self, snapshot_id: str, name: str) -> Path:
        """A file of a finished snapshot; anything that would leave its directory is not found."""
        snapshot = self.get(snapshot_id)
        if snapshot.status is SnapshotStatus.READY:
            base = self.profile_dir / snapshot.id
        else:
            base = self.failed_dir / snapshot.id / "run"
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
        """(size, chunks) of a file of a snapshot held only in the object store."""
        snapshot = self.get(snapshot_id)
        found = None
        # The name is used in a bucket path and a header: a plain file name of this snapshot.
        plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}", name) and ".." not in name
        if self._remote is not None and plain and name in {f.name for f in snapshot.files}:
            found = self._remote.stream(snapshot, name)
        if found is None:
            raise FileNotFound(f"snapshot {snapshot_id} has no file {name!r}")
        return found

    # ---- changing finished snapshots -------------------------------------------------------

    def delete(self, snapshot_id: str) -> None:
        """Gone locally at once; listeners remove the copies elsewhere (`DELETED`)."""
        self.get(snapshot_id)  # outside the lock: an id not listed yet is read from remote
        with self._changing():
            snapshot = self._indexed(snapshot_id)
            if snapshot.status.in_flight:
                raise SnapshotBusy(
                    f"snapshot {snapshot_id} is still {snapshot.status}; delete it later"
                )
            self._remove(snapshot_id)
            self._holds.discard(snapshot_id)
            self._changed(StoreEventKind.DELETED, snapshot, "")

    def set_pinned(self, snapshot_id: str, pinned: bool) -> Snapshot:
        self.get(snapshot_id)
        with self._changing():
            snapshot = self._indexed(snapshot_id)
            if snapshot.status.in_flight:
                raise SnapshotBusy(f"snapshot {snapshot_id} is still {snapshot.status}")
            self._pin(snapshot, pinned)
        return snapshot

    def set_baseline(self, snapshot_id: str, key: str) -> Snapshot:
        """Make a ready snapshot the baseline for `key` (see baselines.py); it is pinned."""
        self.get(snapshot_id)
        with self._changing():
            snapshot = self._indexed(snapshot_id)
            if snapshot.status is not SnapshotStatus.READY:
                raise InvalidRequest(
                    f"snapshot {snapshot_id} is {snapshot.status}; only a ready one is a baseline"
                )
            self._pin(snapshot, True)
            self.baselines.set(key, snapshot_id)
        return snapshot

    def baseline(self, key: str) -> Snapshot | None:
        snapshot_id = self.baselines.get(key)
        if snapshot_id is None:
            return None
        try:
            return self.get(snapshot_id)
        except SnapshotNotFound:
            return None

    # ---- internals -------------------------------------------------------------------------

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """The store's lock; the changes recorded inside are told once the outermost is left."""
        events: list[StoreEvent] = []
        try:
            with self._lock:
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

    def _changed(self, kind: StoreEventKind, snapshot: Snapshot, location: str) -> None:
        """Record a change (under the lock); a copy elsewhere is owed for what is still here."""
        if self._remote is not None and kind in (StoreEventKind.PUBLISHED, StoreEventKind.UPDATED):
            self._holds.add(snapshot.id)
        self._events.append(StoreEvent(kind, snapshot.model_copy(), location))

    def _indexed(self, snapshot_id: str) -> Snapshot:
        snapshot = self.index.get(snapshot_id) if is_snapshot_id(snapshot_id) else None
        if snapshot is None:
            raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
        return snapshot

    def _pin(self, snapshot: Snapshot, pinned: bool) -> None:
        snapshot.pinned = pinned
        entry = self.index.entries().get(snapshot.id)
        if entry is not None and entry.location == REMOTE:
            # Nothing local to rewrite: the record elsewhere is rewritten by a listener.
            self.index.upsert(
                snapshot, location=REMOTE, size_bytes=snapshot.size_bytes, doc_mtime_ns=0
            )
            self._changed(StoreEventKind.UPDATED, snapshot, REMOTE)
            return
        location = READY if snapshot.status is SnapshotStatus.READY else FAILED
        self._write(self._dir_of(snapshot.id, location), snapshot, location)
        self._changed(StoreEventKind.UPDATED, snapshot, location)

    def _dir_of(self, snapshot_id: str, location: str) -> Path:
        return {READY: self.profile_dir, FAILED: self.failed_dir, STAGING: self.staging_dir}[
            location
        ] / snapshot_id

    def _write(self, directory: Path, snapshot: Snapshot, location: str) -> None:
        write_json(directory / SNAPSHOT_FILE, snapshot)
        self._index_snapshot(snapshot, directory, location)

    def _index_snapshot(self, snapshot: Snapshot, directory: Path, location: str) -> None:
        doc = directory / SNAPSHOT_FILE
        self.index.upsert(
            snapshot,
            location=location,
            size_bytes=dir_size(directory),
            doc_mtime_ns=doc.stat().st_mtime_ns if doc.exists() else 0,
        )

    def _remove(self, snapshot_id: str) -> None:
        """Rename away first, so a half-deleted snapshot is never listed, then delete."""
        entry = self.index.entries().get(snapshot_id)
        for location in (entry.location,) if entry and entry.location in _DIRS else _DIRS[:2]:
            directory = self._dir_of(snapshot_id, location)
            if directory.exists():
                trash = self.staging_dir / f".trash-{snapshot_id}"
                os.replace(directory, trash)
                shutil.rmtree(trash, ignore_errors=True)
        self.index.remove(snapshot_id)
        self.baselines.forget(snapshot_id)

    def _enforce_retention(self) -> None:
        """Bound the local copies only (a bucket has lifecycle rules); held ones count as pinned."""
        entries = [
            replace(e, pinned=True) if e.id in self._holds else e
            for e in self.index.entries().values()
            if e.location != REMOTE
        ]
        for snapshot_id in select_evictions(
            entries, max_count=self.max_count, max_bytes=self.max_bytes
        ):
            log.info("retention: evicting snapshot %s", snapshot_id)
            snapshot = self.index.get(snapshot_id)
            self._remove(snapshot_id)
            if snapshot is None:
                continue
            location = ""
            if self._remote is not None:  # copied elsewhere: still listed, read from there
                location = REMOTE
                self.index.upsert(
                    snapshot, location=REMOTE, size_bytes=snapshot.size_bytes, doc_mtime_ns=0
                )
            self._changed(StoreEventKind.EVICTED, snapshot, location)

    def _recover_interrupted(self) -> None:
        recover_interrupted(self.staging_dir, self.profile_dir, self.fail)

    def _reconcile_index(self) -> None:
        reconcile_index(self.index, self.profile_dir, self.failed_dir, self._index_snapshot)
