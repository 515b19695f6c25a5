"""What a start finds: snapshots a stopped service left in flight, and an index to bring in line
with the `snapshot.json` files on disk (or to rebuild, when it was lost)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from profiler_service.errors import SnapshotErrorCode
from profiler_service.models import Snapshot, SnapshotError, SnapshotStatus, is_snapshot_id
from profiler_service.store.index import IndexEntry, SnapshotIndex
from profiler_service.store.layout import FAILED, READY, SNAPSHOT_FILE

__all__ = ["reconcile_index", "recover_interrupted"]

log = logging.getLogger(__name__)


def recover_interrupted(
    staging_dir: Path, profile_dir: Path, fail: Callable[..., Snapshot]
) -> None:
    """Whatever is in staging at start-up was in flight when the service stopped: each is
    marked `interrupted` and failed (`fail(snapshot, keep_files=False)`)."""
    for staging in sorted(staging_dir.iterdir()):
        if staging.name.startswith(".") or not is_snapshot_id(staging.name):
            shutil.rmtree(staging, ignore_errors=True) if staging.is_dir() else staging.unlink()
            continue
        if (profile_dir / staging.name / SNAPSHOT_FILE).exists():
            shutil.rmtree(staging, ignore_errors=True)  # stopped between publish's two steps
            continue
        try:
            snapshot = Snapshot.model_validate_json((staging / SNAPSHOT_FILE).read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("dropping unreadable staging snapshot %s: %s", staging.name, exc)
            shutil.rmtree(staging, ignore_errors=True)
            continue
        was = snapshot.status
        snapshot.status = SnapshotStatus.INTERRUPTED
        snapshot.error = SnapshotError(
            code=SnapshotErrorCode.INTERRUPTED,
            detail=f"the service stopped while this snapshot was {was}; partial files were removed",
        )
        log.warning(
            "snapshot %s was %s when the service stopped: marked interrupted", snapshot.id, was
        )
        fail(snapshot, keep_files=False)


def reconcile_index(
    index: SnapshotIndex,
    profile_dir: Path,
    failed_dir: Path,
    index_snapshot: Callable[[Snapshot, Path, str], None],
) -> None:
    """Bring the index in line with the snapshot.json files (rebuilds it when it was lost)."""
    on_disk: dict[str, tuple[str, Path]] = {}
    for location, parent in ((READY, profile_dir), (FAILED, failed_dir)):
        for directory in parent.iterdir():
            if (directory / SNAPSHOT_FILE).is_file() and is_snapshot_id(directory.name):
                on_disk[directory.name] = (location, directory)
    indexed = index.entries()
    for snapshot_id, (location, directory) in on_disk.items():
        entry: IndexEntry | None = indexed.get(snapshot_id)
        mtime = (directory / SNAPSHOT_FILE).stat().st_mtime_ns
        if entry and entry.location == location and entry.doc_mtime_ns == mtime:
            continue
        try:
            snapshot = Snapshot.model_validate_json((directory / SNAPSHOT_FILE).read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("skipping unreadable %s: %s", directory / SNAPSHOT_FILE, exc)
            continue
        index_snapshot(snapshot, directory, location)
    for snapshot_id, entry in indexed.items():
        if snapshot_id not in on_disk and entry.doc_mtime_ns != 0 and entry.location != "remote":
            index.remove(snapshot_id)
