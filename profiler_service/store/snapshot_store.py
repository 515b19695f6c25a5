"""Snapshots on disk in the TensorBoard/XProf layout; a snapshot appears only when complete.

    STORE/plugins/profile/<id>/<host>.xplane.pb   ready: every XProf/TensorBoard lists it as a run
    STORE/plugins/profile/<id>/snapshot.json
    STORE/failed/<id>/snapshot.json               failed or interrupted (files kept under run/)
    STORE/.staging/<id>/snapshot.json             in flight: capture/ is the profiler's logdir,
    STORE/.staging/<id>/run/                      run/ the adopted files being analysed
    STORE/index.sqlite                            cache of every snapshot.json
    STORE/.mirror/<id>.upload|.delete             queued for the object-store mirror (optional)

Files and names: layout.py; what a restart recovers and re-indexes: recovery.py.

The profiler itself always writes `<logdir>/plugins/profile/<run>/`, so XProf could list a
staging capture only between the profiler saving its file and `adopt_capture` moving it (moments);
analysis and everything after happen outside any `plugins/profile` path. Publishing is one
directory rename on the same filesystem.

With a mirror (`PROFILER_STORE_URL`, see mirror_sync.py) every finished snapshot is also copied to
an object store in the same layout, and snapshots other sidecars put there are listed as well.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

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
from profiler_service.store.index import SnapshotIndex, SnapshotQuery
from profiler_service.store.layout import (
    FAILED,
    READY,
    SNAPSHOT_FILE,
    STAGING,
    dir_size,
    list_files,
    write_json,
)
from profiler_service.store.recovery import reconcile_index, recover_interrupted
from profiler_service.store.retention import select_evictions

log = logging.getLogger(__name__)

_DIRS = (READY, FAILED, STAGING)  # locations with a local directory ("remote" has none)


class StoreSync(Protocol):
    """What the store needs of a mirror to a shared bucket (mirror_sync.MirrorSync is one)."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def queue_upload(self, snapshot_id: str) -> None: ...
    def fetch(self, snapshot_id: str) -> Snapshot | None: ...
    def refresh(self) -> Any: ...
    def stream(self, snapshot: Snapshot, name: str) -> Any: ...
    def delete(self, snapshot_id: str) -> None: ...
    def is_remote(self, snapshot_id: str) -> bool: ...
    def update_remote(self, snapshot: Snapshot) -> None: ...
    def retention_view(self, entries: Any) -> Any: ...
    def evicted(self, snapshot: Snapshot) -> None: ...


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
        self._index: SnapshotIndex | None = None
        self.baselines = BaselineRegistry(self.root / "baselines.json")
        # A shared bucket's mirror (store/mirror_sync.py) attaches itself here: the store tells it
        # what happened and asks it for what is not local; it never builds one.
        self.sync: StoreSync | None = None

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
        with self._lock:
            self._recover_interrupted()
            self._reconcile_index()
        if self.sync is not None:
            self.sync.start()

    def close(self) -> None:
        if self.sync is not None:
            self.sync.stop()
        if self._index is not None:
            self._index.close()

    @property
    def index(self) -> SnapshotIndex:
        if self._index is None:
            raise RuntimeError("SnapshotStore.open() was not called")
        return self._index

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
        except OSError as exc:
            shutil.rmtree(self.staging_dir / snapshot.id, ignore_errors=True)
            raise StoreNotWritable(
                f"the snapshot store {self.root} is not writable: {exc}"
            ) from exc
        return capture_dir

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
        with self._lock:
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
            if self.sync is not None:
                self.sync.queue_upload(snapshot.id)
            self._enforce_retention()
        return snapshot

    def fail(self, snapshot: Snapshot, *, keep_files: bool) -> Snapshot:
        """Move an unfinished snapshot to `failed/`; files are kept only when they are whole."""
        with self._lock:
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
                if self.sync is not None:
                    self.sync.queue_upload(snapshot.id)
                self._enforce_retention()
            except OSError as exc:
                # The store itself is broken (read-only, full): keep the record in the index only.
                log.error("could not record failed snapshot %s on disk: %s", snapshot.id, exc)
                self.index.upsert(snapshot, location=FAILED, size_bytes=0, doc_mtime_ns=0)
        return snapshot

    # ---- reading ---------------------------------------------------------------------------

    def get(self, snapshot_id: str) -> Snapshot:
        snapshot = self.index.get(snapshot_id) if is_snapshot_id(snapshot_id) else None
        if snapshot is None and self.sync is not None and is_snapshot_id(snapshot_id):
            snapshot = self.sync.fetch(snapshot_id)  # another sidecar's, not yet listed here
        if snapshot is None:
            raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
        return snapshot

    def list(self, query: SnapshotQuery) -> tuple[list[Snapshot], int]:
        if self.sync is not None:
            self.sync.refresh()
        return self.index.query(query)

    def list_docs(self, query: SnapshotQuery) -> tuple[list[str], int]:
        """`list` as snapshot.json texts, unparsed (GET /profiles splices them)."""
        if self.sync is not None:
            self.sync.refresh()
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
        if self.sync is not None and plain and name in {f.name for f in snapshot.files}:
            found = self.sync.stream(snapshot, name)
        if found is None:
            raise FileNotFound(f"snapshot {snapshot_id} has no file {name!r}")
        return found

    # ---- changing finished snapshots -------------------------------------------------------

    def delete(self, snapshot_id: str) -> None:
        with self._lock:
            snapshot = self.get(snapshot_id)
            if snapshot.status.in_flight:
                raise SnapshotBusy(
                    f"snapshot {snapshot_id} is still {snapshot.status}; delete it later"
                )
            self._remove(snapshot_id)
        if self.sync is not None:
            self.sync.delete(snapshot_id)

    def set_pinned(self, snapshot_id: str, pinned: bool) -> Snapshot:
        with self._lock:
            snapshot = self.get(snapshot_id)
            if snapshot.status.in_flight:
                raise SnapshotBusy(f"snapshot {snapshot_id} is still {snapshot.status}")
            snapshot.pinned = pinned
            if self.sync is not None and self.sync.is_remote(snapshot_id):
                self.sync.update_remote(snapshot)
                return snapshot
            location = READY if snapshot.status is SnapshotStatus.READY else FAILED
            self._write(self._dir_of(snapshot_id, location), snapshot, location)
            if self.sync is not None:
                self.sync.queue_upload(snapshot_id)
        return snapshot

    def set_baseline(self, snapshot_id: str, key: str) -> Snapshot:
        """Make a ready snapshot the baseline for `key` (see baselines.py); it is pinned."""
        with self._lock:
            snapshot = self.get(snapshot_id)
            if snapshot.status is not SnapshotStatus.READY:
                raise InvalidRequest(
                    f"snapshot {snapshot_id} is {snapshot.status}; only a ready one is a baseline"
                )
            snapshot = self.set_pinned(snapshot_id, True)
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
        entries = list(self.index.entries().values())
        if self.sync is not None:  # the local cache only; the bucket has lifecycle rules
            entries = self.sync.retention_view(entries)
        for snapshot_id in select_evictions(
            entries, max_count=self.max_count, max_bytes=self.max_bytes
        ):
            log.info("retention: evicting snapshot %s", snapshot_id)
            snapshot = self.index.get(snapshot_id)
            self._remove(snapshot_id)
            if self.sync is not None and snapshot is not None:
                self.sync.evicted(snapshot)

    def _recover_interrupted(self) -> None:
        recover_interrupted(self.staging_dir, self.profile_dir, self.fail)

    def _reconcile_index(self) -> None:
        reconcile_index(self.index, self.profile_dir, self.failed_dir, self._index_snapshot)
