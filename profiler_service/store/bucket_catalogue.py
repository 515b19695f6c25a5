"""The bucket catalogue: which snapshots are ours, which the bucket holds (and at which version),
and the listing that indexes what other sidecars wrote. All the hub needs of a bucket.

Down: a thread lists the bucket when a reader lists and the last listing is older than
`refresh_interval_s`, and indexes the snapshots other sidecars wrote under the location `remote`
(no local files: downloads stream from the bucket, bucket_reader.py). Readers never wait for it:
they are answered from the index. The bucket is the truth for those; the local index is a cache.

The catalogue (under this class's own lock): which ids the store holds locally (ours: never read
back from the bucket) and, for each it lists from the bucket, the version of `snapshot.json` last
indexed, so a refresh reads only what is new or rewritten. What our upload queue still has to
do (upload_queue.py) is not read back either: the bucket does not show it yet.

Manifests (manifest.py): a refresh with many snapshots to read (`MANIFEST_MIN_WANTED`: a first
sync) reads the sidecars' manifests that changed since it last read them and takes each line
whose version is the one it listed, then reads the rest one `snapshot.json` at a time.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.models import Snapshot
from profiler_service.store.events import REMOTE, RemoteSnapshot, StoreEvent, StoreEventKind
from profiler_service.store.layout import FAILED, READY
from profiler_service.store.manifest import ManifestReader
from profiler_service.store.snapshot_store import SnapshotStore

if TYPE_CHECKING:
    from profiler_service.store.bucket_client import BucketClient, RemoteEntry

__all__ = ["BucketCatalogue", "OwnChanges", "RefreshStats", "brief", "parse_remote"]

log = logging.getLogger(__name__)

REFRESH_BATCH = 500  # snapshot.json files read, parsed and indexed at a time
MANIFEST_MIN_WANTED = 100  # fewer to read: one snapshot.json each beats a manifest each


@dataclass
class RefreshStats:
    """What one refresh found: complete snapshots listed, (re)indexed and dropped, and its time."""

    listed: int = 0
    indexed: int = 0
    removed: int = 0
    listed_s: float = 0.0  # listing the bucket
    read_s: float = 0.0  # reading the new snapshot.json files (and manifests)
    duration_s: float = 0.0
    manifests: int = 0  # manifests read
    from_manifests: int = 0  # snapshots indexed from them (the rest: one read each)
    full: bool = True  # the whole bucket listed (else only what was taken since a cursor)
    skipped: str | None = None  # why it did not run, when another replica synced instead


class OwnChanges(Protocol):
    """What this store still has to change in the bucket (upload_queue.py's UploadQueue)."""

    def uploading(self) -> set[str]: ...

    def deleting(self) -> set[str]: ...

    def queue_delete(self, snapshot_id: str) -> None: ...


class BucketCatalogue(LoopOwner):
    def __init__(
        self,
        store: SnapshotStore,
        bucket: BucketClient,
        *,
        refresh_interval_s: float = 10.0,
        own_manifest: str | None = None,
    ):
        self.store = store
        self.bucket = bucket
        self.refresh_interval_s = refresh_interval_s
        self.own: OwnChanges | None = None  # the upload queue, where this store writes
        self._wake = threading.Event()
        self._loop = BackgroundLoop(
            "store-mirror-list", self._refresh_round, wake=self._wake, join_s=15
        )
        self._refresh_lock = threading.Lock()
        self._last_refresh = -math.inf
        self.last_refresh: RefreshStats | None = None
        # Lock order: this lock may be held while calling the store or the queue, never the
        # other way round (the store calls nothing here under its own lock).
        self._lock = threading.Lock()
        self._seeded = False
        self._local: set[str] = set()  # held by the store locally: ours
        self._remote: dict[str, int] = {}  # listed from the bucket: version last indexed
        self._manifests = ManifestReader(bucket, own=own_manifest)

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        super().start()
        if math.isfinite(self.refresh_interval_s):
            self._wake.set()  # the first listing, without waiting for a reader

    # ---- what the store tells (events.py) ---------------------------------------------------

    def store_changed(self, event: StoreEvent) -> None:
        """Note the change; a deleted snapshot is queued for deletion from the bucket before
        the lock is left, so a refresh under way cannot list it again."""
        snapshot_id = event.snapshot.id
        with self._lock:
            self._seed()
            if event.kind is StoreEventKind.PUBLISHED:
                self._local.add(snapshot_id)
                self._remote.pop(snapshot_id, None)
            elif event.kind is StoreEventKind.EVICTED:
                self._local.discard(snapshot_id)
                if event.location == REMOTE:
                    self._remote[snapshot_id] = 0  # read back at the next refresh
            elif event.kind is StoreEventKind.DELETED:
                self._local.discard(snapshot_id)
                self._remote.pop(snapshot_id, None)
                if self.own is not None:
                    self.own.queue_delete(snapshot_id)

    def local_ids(self) -> set[str]:
        """The snapshots the store holds locally: ours."""
        with self._lock:
            self._seed()
            return set(self._local)

    def _seed(self) -> None:
        """The catalogue starts from the store's index (under self._lock)."""
        if self._seeded:
            return
        for snapshot_id, entry in self.store.entries().items():
            if entry.location == REMOTE:
                self._remote.setdefault(snapshot_id, entry.doc_mtime_ns)
            elif entry.location in (READY, FAILED):
                self._local.add(snapshot_id)
        self._seeded = True

    def _deleting(self) -> set[str]:
        return self.own.deleting() if self.own is not None else set()

    # ---- listing ---------------------------------------------------------------------------

    def listing_requested(self) -> None:
        """A reader listed: wake the listing thread if the last listing is due; never waits."""
        if time.monotonic() - self._last_refresh >= self.refresh_interval_s:
            self._wake.set()

    def _refresh_round(self) -> None:
        """A listing when a reader or the interval asks for one (they set the wake)."""
        if self._wake.is_set():
            self._wake.clear()
            self.refresh()

    def refresh(self, *, force: bool = False) -> RefreshStats | None:
        """Index what other sidecars wrote; drop remote entries gone from the bucket.

        At most once per `refresh_interval_s` (also after a failure), and never two at once.
        Only new and rewritten `snapshot.json` files are read (their ETag changed),
        `REFRESH_BATCH` at a time, each batch indexed in one transaction: the fleet hub's first
        sync of a large bucket stays bounded in memory. No lock is held while the bucket is
        called. Returns what changed, or None when it did not run or the bucket did not answer.
        """
        if not force and time.monotonic() - self._last_refresh < self.refresh_interval_s:
            return None
        if not self._refresh_lock.acquire(blocking=False):
            return None
        try:
            started = self._last_refresh = time.monotonic()
            remote = self.bucket.list_snapshots()
            listed_s = time.monotonic() - started
            ours = self._deleting() | (self.own.uploading() if self.own is not None else set())
            with self._lock:
                self._seed()
                wanted = [
                    e
                    for e in remote.values()
                    if e.id not in ours
                    and e.id not in self._local
                    and self._remote.get(e.id) != e.version
                ]
            stats = RefreshStats(listed=len(remote), listed_s=listed_s)
            if len(wanted) >= MANIFEST_MIN_WANTED:
                taken = self._from_manifests({e.id: e for e in wanted}, stats)
                stats.indexed += stats.from_manifests
                wanted = [e for e in wanted if e.id not in taken]
            for first in range(0, len(wanted), REFRESH_BATCH):
                batch = wanted[first : first + REFRESH_BATCH]
                read_from = time.monotonic()
                docs = self.bucket.read_docs(batch)
                stats.read_s += time.monotonic() - read_from
                found = [f for e in batch if (f := parse_remote(e, docs.get(e.id)))]
                stats.indexed += len(self.index(found))
            with self._lock:
                gone = [i for i in self._remote if i not in remote]
                for snapshot_id in gone:
                    del self._remote[snapshot_id]
                stats.removed = len(self.store.remove_remote(gone))
            stats.duration_s = time.monotonic() - started
            self.last_refresh = stats
            return stats
        except Exception as exc:
            log.warning("could not list %s: %s", self.bucket.url, brief(exc))
            return None
        finally:
            self._refresh_lock.release()

    def _from_manifests(self, wanted: dict[str, RemoteEntry], stats: RefreshStats) -> set[str]:
        """Index what the changed manifests hold of `wanted` at its listed version; the ids."""
        taken: set[str] = set()
        for batch in self._manifests.matching(wanted, stats):
            found = [f for entry, doc in batch if (f := parse_remote(entry, doc))]
            indexed = self.index(found)
            stats.from_manifests += len(indexed)
            taken.update(f.snapshot.id for f in found)
        return taken

    def index(self, found: list[RemoteSnapshot]) -> list[str]:
        """Index what was read, unless this store holds it or deletes it meanwhile."""
        with self._lock:
            self._seed()
            deleting = self._deleting()
            found = [
                f
                for f in found
                if f.snapshot.id not in deleting and f.snapshot.id not in self._local
            ]
            added = self.store.add_remote(found)
            versions = {f.snapshot.id: f.version for f in found}
            for snapshot_id in added:
                self._remote[snapshot_id] = versions[snapshot_id]
        return added

    def deleting(self, snapshot_id: str) -> bool:
        return snapshot_id in self._deleting()


def parse_remote(entry: RemoteEntry, data: bytes | str | None) -> RemoteSnapshot | None:
    """A complete snapshot's record from the bucket, or None (vanished, unreadable, in flight)."""
    if data is None:
        return None
    try:
        snapshot = Snapshot.model_validate_json(data)
    except ValueError as exc:
        log.warning("skipping unreadable snapshot.json of %s in the bucket: %s", entry.id, exc)
        return None
    if snapshot.id != entry.id or snapshot.status.in_flight:
        return None
    return RemoteSnapshot(snapshot, entry.version)


def brief(exc: BaseException) -> str:
    """One line: backends put whole tracebacks and request dumps in their messages."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
