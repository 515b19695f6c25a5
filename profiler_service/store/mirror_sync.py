"""Keeps a local SnapshotStore and its object-store mirror in step, without sharing a lock.

The store tells (events.py): each change reaches `store_changed()` after the store's lock is
released, and only queues work here. This class owns everything about the bucket: its queue, its
catalogue, its lock and its threads; it reads the store through public methods only.

Up: every finished snapshot is queued (a marker file `STORE/.mirror/<id>.upload`, so a restart
keeps the queue) and copied by one background thread; a failure (bucket down) leaves the
snapshot ready locally and the marker in place, and is retried with a growing delay (1 s, 2 s,
... up to `retry_max_s`), at once on the next change, and at the next start. A queued snapshot is
held from local retention (`store.hold`) until its copy is made. A pin is queued the same way (for
a remote-only snapshot only its `snapshot.json` is rewritten).

Down: a second thread lists the bucket when a reader lists and the last listing is older than
`refresh_interval_s`, and indexes the snapshots other sidecars wrote under the location `remote`
(no local files: downloads stream from the bucket). Readers never wait for it: they are answered
from the index. The bucket is the truth for those; the local index is a cache of it.

Deletes are queued too (`STORE/.mirror/<id>.delete`), done by the same thread, retried like an
upload; the id stays hidden from refreshes until it is done.

The catalogue (under this class's own lock): which ids the store holds locally (our own: never
read back from the bucket) and, for each it lists from the bucket, the version of `snapshot.json`
last indexed, so a refresh reads only what is new or rewritten.

Manifests (manifest.py): after each pass of the queue, a sidecar rewrites its manifest, the
`snapshot.json` of every snapshot it holds and has copied, each with the version the bucket gave
it. A refresh with many snapshots to read (`MANIFEST_MIN_WANTED`: a first sync) reads the
manifests that changed since it last read them and takes each line whose version is the one it
listed, then reads the rest one `snapshot.json` at a time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from profiler_service.lifecycle import BackgroundLoop
from profiler_service.models import Snapshot, is_snapshot_id
from profiler_service.store.baselines import fleet_baselines_path
from profiler_service.store.events import (
    REMOTE,
    RemoteSnapshot,
    StoreEvent,
    StoreEventKind,
)
from profiler_service.store.layout import FAILED, READY
from profiler_service.store.manifest import (
    ManifestEntry,
    ManifestReader,
    decode,
    encode,
    manifest_path,
)
from profiler_service.store.object_store import ObjectStoreMirror, RemoteEntry
from profiler_service.store.snapshot_store import SnapshotStore

__all__ = ["REMOTE", "MirrorSync", "RefreshStats", "mirrored_store"]

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


UPLOAD, DELETE = "upload", "delete"


def mirrored_store(
    root: Path,
    mirror: ObjectStoreMirror,
    *,
    refresh_interval_s: float = 10.0,
    retry_max_s: float = 300.0,
    sidecar: str | None = None,
    **store_options: int,
) -> tuple[SnapshotStore, MirrorSync]:
    """A SnapshotStore at `root` and the MirrorSync that copies it to `mirror`'s bucket, wired
    together (open the store, then start the sync; stop the sync, then close the store).
    `sidecar` (manifest.sidecar_key): the name of this sidecar's manifest and baselines in the
    bucket; None (the hub): it writes neither."""
    store = SnapshotStore(root, **store_options)
    sync = MirrorSync(
        store,
        mirror,
        refresh_interval_s=refresh_interval_s,
        retry_max_s=retry_max_s,
        sidecar=sidecar,
    )
    sync.attach()
    return store, sync


class MirrorSync:
    def __init__(
        self,
        store: SnapshotStore,
        mirror: ObjectStoreMirror,
        *,
        refresh_interval_s: float = 10.0,
        retry_max_s: float = 300.0,
        sidecar: str | None = None,
    ):
        self.store = store
        self.mirror = mirror
        self.pending_dir = store.root / ".mirror"
        self.refresh_interval_s = refresh_interval_s
        self.retry_max_s = retry_max_s
        self.uploads_total = 0
        self.upload_failures_total = 0
        self._wake = threading.Event()
        self._retry_s = 0.0  # the upload loop's wait after a refused pass
        self._list_wake = threading.Event()
        self._loops = (
            BackgroundLoop("store-mirror", self._upload_round, wake=self._wake, join_s=15),
            BackgroundLoop(
                "store-mirror-list", self._refresh_round, wake=self._list_wake, join_s=15
            ),
        )
        self._refresh_lock = threading.Lock()
        self._last_refresh = -math.inf
        self.last_refresh: RefreshStats | None = None
        # The catalogue. Lock order: this lock may be held while calling the store, never the
        # other way round (the store calls nothing here under its own lock).
        self._lock = threading.Lock()
        self._seeded = False
        self._local: set[str] = set()  # held by the store locally: our own
        self._remote: dict[str, int] = {}  # listed from the bucket: version last indexed
        # Our manifest: what we copied (each doc as written, with its version); and the
        # others', read again only when they changed.
        self.manifest = manifest_path(sidecar) if sidecar else None
        self.baselines_path = fleet_baselines_path(sidecar) if sidecar else None
        self._baselines_copied: dict[str, str] | None = None
        self._written: dict[str, ManifestEntry] | None = None  # None: not read back yet
        self._manifest_dirty = sidecar is not None
        self._manifest_reader = ManifestReader(mirror, own=self.manifest)

    # ---- lifecycle -------------------------------------------------------------------------

    def attach(self) -> None:
        """Hear the store's changes, serve its remote reads, and hold what still waits for
        upload from a previous run (before `store.open()`, whose recovery applies retention)."""
        self.store.subscribe(self)
        self.store.attach_remote(self)
        for snapshot_id in self._pending(UPLOAD):
            self.store.hold(snapshot_id)

    def start(self) -> None:
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        pending = self.pending_count()
        if pending:
            log.info("%d snapshot(s) wait for upload to %s", pending, self.mirror.url)
        for loop in self._loops:
            loop.start()
        self._wake.set()
        if math.isfinite(self.refresh_interval_s):
            self._list_wake.set()  # the first listing, without waiting for a reader

    def stop(self, timeout_s: float | None = None) -> None:
        for loop in self._loops:
            loop.stop(timeout_s)

    # ---- what the store tells (events.py) ---------------------------------------------------

    def store_changed(self, event: StoreEvent) -> None:
        """Note the change in the catalogue and queue the bucket's side of it; never waits."""
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
                # Queued before the lock is left: a refresh under way cannot list it again.
                self.queue_delete(snapshot_id)
            if self.manifest is not None and event.kind is StoreEventKind.EVICTED:
                self._manifest_dirty = True  # it leaves our manifest
                self._wake.set()
        if event.kind in (StoreEventKind.PUBLISHED, StoreEventKind.UPDATED):
            self.queue_upload(snapshot_id)

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

    # ---- the queue -------------------------------------------------------------------------

    def _marker(self, snapshot_id: str, kind: str) -> Path:
        return self.pending_dir / f"{snapshot_id}.{kind}"

    def _pending(self, kind: str) -> set[str]:
        try:
            names = [p.name for p in self.pending_dir.iterdir()]
        except FileNotFoundError:
            return set()
        return {n.removesuffix(f".{kind}") for n in names if n.endswith(f".{kind}")}

    def pending_count(self) -> int:
        return len(self._pending(UPLOAD))

    def is_pending(self, snapshot_id: str) -> bool:
        return self._marker(snapshot_id, UPLOAD).exists()

    def queue_upload(self, snapshot_id: str) -> None:
        try:
            self.pending_dir.mkdir(parents=True, exist_ok=True)
            self._marker(snapshot_id, UPLOAD).touch()
        except OSError as exc:  # a broken local store: the snapshot is not kept either
            log.error("cannot queue snapshot %s for upload: %s", snapshot_id, exc)
            self.store.release(snapshot_id)
            return
        self.store.hold(snapshot_id)  # again: an upload finishing meanwhile released it
        self._wake.set()

    def queue_delete(self, snapshot_id: str) -> None:
        """Remove a snapshot from the bucket, by the upload thread (after any upload of it)."""
        try:
            self.pending_dir.mkdir(parents=True, exist_ok=True)
            self._marker(snapshot_id, DELETE).touch()
            self._marker(snapshot_id, UPLOAD).unlink(missing_ok=True)
        except OSError as exc:
            log.error("cannot queue snapshot %s for deletion: %s", snapshot_id, exc)
            return
        self._wake.set()

    @property
    def loops(self) -> tuple[BackgroundLoop, ...]:
        return self._loops

    def _upload_round(self) -> float | None:
        """One pass over the queue, the manifest and the baselines; None (until woken) when
        the bucket took it all, else the next attempt's wait, doubling up to `retry_max_s`."""
        self._wake.clear()
        if (
            self.read_back_manifest()
            and self.sync_pending()
            and self.write_manifest()
            and self.copy_baselines()
        ):
            self._retry_s = 0.0
            return None
        self._retry_s = min(max(2 * self._retry_s, 1.0), self.retry_max_s)
        log.info("next upload attempt to %s in %g s", self.mirror.url, self._retry_s)
        return self._retry_s

    def sync_pending(self) -> bool:
        """One pass over the queue; False when the bucket refused (the rest waits)."""
        try:
            markers = sorted(self.pending_dir.iterdir())
        except FileNotFoundError:
            return True
        for marker in markers:
            if self._loops[0].stopping.is_set():
                return True  # shutting down: the rest waits for the next start
            snapshot_id, _, kind = marker.name.rpartition(".")
            if not is_snapshot_id(snapshot_id) or kind not in (UPLOAD, DELETE):
                marker.unlink(missing_ok=True)
                continue
            try:
                stamp = marker.stat().st_mtime_ns
            except FileNotFoundError:
                continue  # deleted meanwhile
            try:
                if kind == UPLOAD:
                    self._upload(snapshot_id)
                else:
                    self.mirror.delete(snapshot_id)
            except Exception as exc:
                if kind == UPLOAD and self.store.stored(snapshot_id) is None:
                    marker.unlink(missing_ok=True)  # deleted locally while uploading
                    continue
                self.upload_failures_total += 1
                log.warning(
                    "%s of snapshot %s to %s failed (%d pending, %d failures so far): %s",
                    kind,
                    snapshot_id,
                    self.mirror.url,
                    self.pending_count(),
                    self.upload_failures_total,
                    _brief(exc),
                )
                return False
            # Re-queued (a pin) while this ran: keep the marker (and the hold) for the next pass.
            with contextlib.suppress(FileNotFoundError):
                if marker.stat().st_mtime_ns == stamp:
                    marker.unlink()
                    if kind == UPLOAD:
                        self.store.release(snapshot_id)
        return True

    def _upload(self, snapshot_id: str) -> None:
        stored = self.store.stored(snapshot_id)
        if stored is None:  # deleted, or dropped from the bucket by another sidecar
            return
        started = time.monotonic()
        if stored.files_dir is None:  # remote-only: its files are there, its record changed
            entry = self.mirror.write_doc(stored.snapshot)
            sent = 0
        else:
            sent, entry = self.mirror.upload_snapshot(stored.files_dir, stored.snapshot)
        if self.manifest is not None:
            written = ManifestEntry(
                entry.id, entry.location, entry.version, stored.snapshot.model_dump_json()
            )
            with self._lock:
                if self._written is not None:
                    self._written[snapshot_id] = written
                self._manifest_dirty = True
        self.uploads_total += 1
        log.info(
            "snapshot %s uploaded to %s (%d bytes in %.1f s)",
            snapshot_id,
            self.mirror.url,
            sent,
            time.monotonic() - started,
        )

    # ---- our manifest ----------------------------------------------------------------------

    def write_manifest(self) -> bool:
        """Rewrite our manifest if what we hold and copied changed; False when the bucket
        refused (retried with the queue)."""
        if self.manifest is None or not self._manifest_dirty:
            return True
        try:
            with self._lock:
                self._seed()
                self._manifest_dirty = False
                pending = self._pending(UPLOAD)
                entries = [
                    e
                    for i, e in sorted((self._written or {}).items())
                    if i in self._local and i not in pending
                ]
            self.mirror.put_record(self.manifest, encode(entries))
        except Exception as exc:
            self._manifest_dirty = True
            log.warning("could not write the manifest to %s: %s", self.mirror.url, _brief(exc))
            return False
        return True

    def copy_baselines(self) -> bool:
        """Copy STORE/baselines.json beside the snapshots when it changed (for the fleet)."""
        if self.baselines_path is None:
            return True
        baselines = self.store.baselines.all()
        if baselines == self._baselines_copied:
            return True
        namespace = self.baselines_path.rsplit("/", 1)[1].split(".", 1)[0]
        doc = {"namespace": None if namespace == "_" else namespace, "baselines": baselines}
        try:
            self.mirror.put_record(self.baselines_path, json.dumps(doc, sort_keys=True).encode())
        except Exception as exc:
            log.warning("could not copy the baselines to %s: %s", self.mirror.url, _brief(exc))
            return False
        self._baselines_copied = baselines
        return True

    def read_back_manifest(self) -> bool:
        """Once, before the first copies: the lines of our last manifest still true (held,
        copied as is), so a restart does not drop them. False when the bucket refused."""
        if self.manifest is None or self._written is not None:
            return True
        try:
            data = self.mirror.read_paths([self.manifest]).get(self.manifest, b"")
        except Exception as exc:
            log.warning("could not read the manifest from %s: %s", self.mirror.url, _brief(exc))
            return False
        with self._lock:
            self._seed()
            pending = self._pending(UPLOAD)
            self._written = {
                e.id: e for e in decode(data) if e.id in self._local and e.id not in pending
            }
        return True

    def _from_manifests(self, wanted: dict[str, RemoteEntry], stats: RefreshStats) -> set[str]:
        """Index what the changed manifests hold of `wanted` at its listed version; the ids."""
        taken: set[str] = set()
        for batch in self._manifest_reader.matching(wanted, stats):
            found = [f for entry, doc in batch if (f := _parse(entry, doc))]
            indexed = self._index_remote(found)
            stats.from_manifests += len(indexed)
            taken.update(f.snapshot.id for f in found)
        return taken

    # ---- reading the bucket ----------------------------------------------------------------

    def listing_requested(self) -> None:
        """A reader listed: wake the listing thread if the last listing is due; never waits."""
        if time.monotonic() - self._last_refresh >= self.refresh_interval_s:
            self._list_wake.set()

    def _refresh_round(self) -> None:
        """A listing when a reader or the interval asks for one (they set the wake)."""
        if self._list_wake.is_set():
            self._list_wake.clear()
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
            remote = self.mirror.list_snapshots()
            listed_s = time.monotonic() - started
            ours = self._pending(DELETE) | self._pending(UPLOAD)  # our change is not there yet
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
                docs = self.mirror.read_docs(batch)
                stats.read_s += time.monotonic() - read_from
                found = [f for e in batch if (f := _parse(e, docs.get(e.id)))]
                stats.indexed += len(self._index_remote(found))
            with self._lock:
                gone = [i for i in self._remote if i not in remote]
                for snapshot_id in gone:
                    del self._remote[snapshot_id]
                stats.removed = len(self.store.remove_remote(gone))
            stats.duration_s = time.monotonic() - started
            self.last_refresh = stats
            return stats
        except Exception as exc:
            log.warning("could not list %s: %s", self.mirror.url, _brief(exc))
            return None
        finally:
            self._refresh_lock.release()

    def _index_remote(self, found: list[RemoteSnapshot]) -> list[str]:
        """Index what was read, unless this store holds it or deletes it meanwhile."""
        with self._lock:
            self._seed()
            deleting = self._pending(DELETE)
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

    def fetch(self, snapshot_id: str) -> Snapshot | None:
        """A snapshot this index does not know yet, read straight from the bucket."""
        if snapshot_id in self._pending(DELETE):
            return None
        try:
            found = self.mirror.read_doc(snapshot_id)
        except Exception as exc:
            log.warning("could not read %s from %s: %s", snapshot_id, self.mirror.url, _brief(exc))
            return None
        if found is None:
            return None
        entry, data = found
        parsed = _parse(entry, data)
        if parsed is None:
            return None
        return parsed.snapshot if self._index_remote([parsed]) else None

    def stream(self, snapshot: Snapshot, name: str) -> tuple[int, Iterator[bytes]] | None:
        """(size, chunks) of one file of a snapshot, from the bucket; None when it is not there."""
        try:
            size = self.mirror.file_size(snapshot, name)
        except Exception as exc:
            log.warning("could not reach %s for %s: %s", self.mirror.url, name, _brief(exc))
            return None
        if size is None:
            return None
        return size, self.mirror.open_file(snapshot, name)


def _parse(entry: RemoteEntry, data: bytes | str | None) -> RemoteSnapshot | None:
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


def _brief(exc: BaseException) -> str:
    """One line: backends put whole tracebacks and request dumps in their messages."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
