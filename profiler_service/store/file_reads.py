"""A snapshot read from a store's files by a process that does not own the store (the CLI's
`compare --store`): it takes no lock, writes nothing and runs no recovery, so a live service's
captures are left as they are (ownership.py). Publishing is one rename, so a `snapshot.json` it
finds under `plugins/profile/` or `failed/` is whole."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from profiler_service.errors import SnapshotBusy, SnapshotNotFound
from profiler_service.models import Snapshot, is_snapshot_id
from profiler_service.store.layout import SNAPSHOT_FILE
from profiler_service.store.ownership import live_owner

__all__ = ["read_finished_snapshot"]


def read_finished_snapshot(root: Path, snapshot_id: str) -> Snapshot:
    """The finished snapshot `snapshot_id` of the store at `root`; SnapshotBusy while it is in
    flight, SnapshotNotFound when the store's files do not hold it."""
    root = Path(root).expanduser().resolve()
    if not is_snapshot_id(snapshot_id):
        raise SnapshotNotFound(f"{snapshot_id!r} is not a snapshot id")
    for folder in (root / "plugins" / "profile", root / "failed"):
        doc = folder / snapshot_id / SNAPSHOT_FILE
        try:
            return Snapshot.model_validate_json(doc.read_bytes())
        except FileNotFoundError:
            continue
    if (root / ".staging" / snapshot_id).is_dir():
        owner = live_owner(root)
        by = (
            f"by {owner.describe()}: ask again once it is ready"
            if owner
            else "left by a service that stopped: its next start marks it interrupted"
        )
        raise SnapshotBusy(f"snapshot {snapshot_id} is in flight in {root}, {by}")
    listed = _indexed_doc(root / "index.sqlite", snapshot_id)
    if listed is not None:  # a snapshot the store lists from the fleet's bucket
        return Snapshot.model_validate_json(listed)
    raise SnapshotNotFound(f"the store {root} holds no snapshot {snapshot_id}")


def _indexed_doc(index: Path, snapshot_id: str) -> str | None:
    """The snapshot.json text the index keeps for `snapshot_id`, read without writing (SQLite's
    read-only mode; a store without an index, or one it cannot read, has none)."""
    if not index.is_file():
        return None
    try:
        conn = sqlite3.connect(f"{index.as_uri()}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT doc FROM docs WHERE id = ?", (snapshot_id,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None
