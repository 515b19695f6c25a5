"""A snapshot's way into the store: begin -> update -> adopt -> publish | fail, and what a start
does with the snapshots a stopped service left in flight (recovery.py).

Staging writes no event; `publish` and `fail` make the snapshot finished in one rename, under
the store's lock, then let retention evict what the new one puts over the limits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from profiler_service.errors import StoreNotWritable
from profiler_service.models import Snapshot, SnapshotStatus, utcnow
from profiler_service.store.events import StoreEventKind
from profiler_service.store.layout import (
    FAILED,
    READY,
    SNAPSHOT_FILE,
    STAGING,
    list_files,
    write_json,
)
from profiler_service.store.recovery import reconcile_index, recover_interrupted
from profiler_service.store.state import StoreState

__all__ = ["Staging"]

log = logging.getLogger(__name__)


class Staging:
    """The in-flight snapshots under `STORE/.staging/` and their publishing; `evict` is
    retention, run under the lock after each snapshot is finished."""

    def __init__(self, state: StoreState, evict: Callable[[], None]):
        self.state, self.evict = state, evict

    def open(self, url: str | None) -> None:
        """Own the store (or raise StoreOwned), then recover: only the owner may, since what is
        in staging is another live process's capture otherwise (ownership.py)."""
        state = self.state
        try:
            state.root.mkdir(parents=True, exist_ok=True)
            state.owner.acquire(url)
            for d in (state.profile_dir, state.failed_dir, state.staging_dir):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            state.owner.release()
            raise StoreNotWritable(
                f"cannot create the snapshot store at {state.root}: {exc}"
            ) from exc
        state.open_index()
        with state.changing():
            recover_interrupted(state.staging_dir, state.profile_dir, self.fail)
            reconcile_index(state.index, state.profile_dir, state.failed_dir, state.index_snapshot)

    def check_writable(self) -> None:
        probe = self.state.staging_dir / f".probe-{os.getpid()}-{threading.get_ident()}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StoreNotWritable(
                f"the snapshot store {self.state.root} is not writable: {exc}"
            ) from exc

    def begin(self, snapshot: Snapshot) -> Path:
        capture_dir = self.state.staging_dir / snapshot.id / "capture"
        try:
            capture_dir.mkdir(parents=True)
            # The job's profiler server may run as another user on the shared volume.
            capture_dir.chmod(0o777)
            self.state.write(self.state.staging_dir / snapshot.id, snapshot, STAGING)
        except (OSError, sqlite3.Error) as exc:  # a full disk fails the index as well
            self.discard(snapshot.id)
            raise StoreNotWritable(
                f"the snapshot store {self.state.root} is not writable: {exc}"
            ) from exc
        return capture_dir

    def discard(self, snapshot_id: str) -> None:
        shutil.rmtree(self.state.staging_dir / snapshot_id, ignore_errors=True)
        with contextlib.suppress(sqlite3.Error):
            self.state.index.remove(snapshot_id)

    def update(self, snapshot: Snapshot) -> None:
        self.state.write(self.state.staging_dir / snapshot.id, snapshot, STAGING)

    def adopt_capture(self, snapshot: Snapshot, xplane_paths: Iterable[Path]) -> Path:
        run_dir = self.run_dir(snapshot.id)
        run_dir.mkdir(exist_ok=True)
        for path in xplane_paths:
            os.replace(path, run_dir / path.name)
        shutil.rmtree(self.state.staging_dir / snapshot.id / "capture", ignore_errors=True)
        snapshot.files = list_files(run_dir)
        return run_dir

    def run_dir(self, snapshot_id: str) -> Path:
        return self.state.staging_dir / snapshot_id / "run"

    def publish(self, snapshot: Snapshot) -> Snapshot:
        state = self.state
        with state.changing():
            staging = state.staging_dir / snapshot.id
            run_dir = staging / "run"
            run_dir.mkdir(exist_ok=True)
            snapshot.status = SnapshotStatus.READY
            snapshot.finished_at = snapshot.finished_at or utcnow()
            snapshot.files = list_files(run_dir)
            write_json(run_dir / SNAPSHOT_FILE, snapshot)
            final = state.profile_dir / snapshot.id
            os.replace(run_dir, final)
            shutil.rmtree(staging, ignore_errors=True)
            state.index_snapshot(snapshot, final, READY)
            state.changed(StoreEventKind.PUBLISHED, snapshot, READY)
            self.evict()
        return snapshot

    def fail(self, snapshot: Snapshot, *, keep_files: bool) -> Snapshot:
        state = self.state
        with state.changing():
            staging = state.staging_dir / snapshot.id
            snapshot.finished_at = snapshot.finished_at or utcnow()
            shutil.rmtree(staging / "capture", ignore_errors=True)
            if not keep_files:
                shutil.rmtree(staging / "run", ignore_errors=True)
            snapshot.files = list_files(staging / "run")
            try:
                staging.mkdir(parents=True, exist_ok=True)
                write_json(staging / SNAPSHOT_FILE, snapshot)
                final = state.failed_dir / snapshot.id
                os.replace(staging, final)
                state.index_snapshot(snapshot, final, FAILED)
                state.changed(StoreEventKind.PUBLISHED, snapshot, FAILED)
                self.evict()
            except OSError as exc:
                # The store itself is broken (read-only, full): keep the record in the index only.
                log.error("could not record failed snapshot %s on disk: %s", snapshot.id, exc)
                state.index.upsert(snapshot, location=FAILED, size_bytes=0, doc_mtime_ns=0)
        return snapshot
