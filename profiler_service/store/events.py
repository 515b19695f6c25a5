"""What the store tells and asks of whatever keeps a copy of it elsewhere (the bucket mirror).

The seam between `snapshot_store.py` and `mirror_sync.py`, in both directions:

- out: the store calls each `StoreListener` with a `StoreEvent` (published, updated, evicted,
  deleted) AFTER releasing its lock, in the thread that made the change. A listener must return
  quickly and never block on the bucket: the mirror only queues work for its own threads.
- in: what the store does not hold locally it reads through one `RemoteReader` (a snapshot not
  listed yet, a file of a remote-only snapshot), again never under its lock.

The store itself never calls the bucket, and neither side reads the other's private state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from profiler_service.models import Snapshot

__all__ = [
    "REMOTE",
    "RemoteReader",
    "RemoteSnapshot",
    "StoreEvent",
    "StoreEventKind",
    "StoreListener",
    "StoredSnapshot",
]

REMOTE = "remote"  # index location of a snapshot listed from elsewhere, with no local files


class StoreEventKind(StrEnum):
    PUBLISHED = "published"  # a finished snapshot (ready, failed or interrupted) is in the store
    UPDATED = "updated"  # its snapshot.json changed (pinned, unpinned, made a baseline)
    EVICTED = "evicted"  # retention removed the local copy (still listed when it is `remote`)
    DELETED = "deleted"  # removed on request: gone for everyone


@dataclass(frozen=True)
class StoreEvent:
    """One change, as the store saw it when it made it."""

    kind: StoreEventKind
    snapshot: Snapshot
    location: str  # where the store lists it now: "ready", "failed", REMOTE, or "" (gone)


class StoreListener(Protocol):
    def store_changed(self, event: StoreEvent) -> None:
        """Called after the store's lock is released; quick, never raises on purpose."""


@dataclass(frozen=True)
class StoredSnapshot:
    """A finished snapshot as the store holds it: `files_dir` is None when it is remote-only."""

    snapshot: Snapshot
    location: str
    files_dir: Path | None


@dataclass(frozen=True)
class RemoteSnapshot:
    """A snapshot read from elsewhere, and the version of its record there (ETag-derived)."""

    snapshot: Snapshot
    version: int


class RemoteReader(Protocol):
    """What the store reads of snapshots it does not hold; never called under the store's lock."""

    def fetch(self, snapshot_id: str) -> Snapshot | None:
        """A snapshot the store does not list yet (indexing it is the reader's business)."""

    def stream(self, snapshot: Snapshot, name: str) -> tuple[int, Iterator[bytes]] | None:
        """(size, chunks) of one file of a remote-only snapshot; None when it is not there."""

    def listing_requested(self) -> None:
        """Someone listed: refresh what is listed from elsewhere in the background, if due."""
