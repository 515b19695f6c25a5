"""Keeps a local SnapshotStore and its object-store mirror in step.

Up: every finished snapshot is queued (a marker file `STORE/.mirror/<id>.upload`, so a restart
keeps the queue) and copied by one background thread; a failure (bucket down) leaves the
snapshot ready locally and the marker in place, and is retried with a growing delay (1 s, 2 s,
... up to `retry_max_s`), at once on the next publish, and at the next start. Snapshots waiting
for upload are never evicted by local retention.

Down: `refresh()` lists the bucket and indexes the snapshots other sidecars wrote under the
location `remote` (no local files: downloads stream from the bucket). The bucket is the truth
for those; the local index is a cache of it.

Deletes go to the bucket at once; if the bucket is down a `STORE/.mirror/<id>.delete` marker is
retried like an upload, and the id stays hidden from refreshes until it is done.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from profiler_service.errors import StoreNotWritable
from profiler_service.models import Snapshot, is_snapshot_id
from profiler_service.store.index import IndexEntry
from profiler_service.store.object_store import ObjectStoreMirror, RemoteEntry
from profiler_service.store.snapshot_store import SnapshotStore

log = logging.getLogger(__name__)

REMOTE = "remote"  # index location of a snapshot held only in the bucket
REFRESH_BATCH = 500  # snapshot.json files read, parsed and indexed at a time


@dataclass
class RefreshStats:
    """What one refresh found: complete snapshots listed, (re)indexed and dropped, and its time."""

    listed: int = 0
    indexed: int = 0
    removed: int = 0
    listed_s: float = 0.0  # listing the bucket
    read_s: float = 0.0  # reading the new snapshot.json files
    duration_s: float = 0.0


UPLOAD, DELETE = "upload", "delete"


def mirrored_store(
    root: Path,
    mirror: ObjectStoreMirror,
    *,
    refresh_interval_s: float = 10.0,
    retry_max_s: float = 300.0,
    **store_options: Any,
) -> SnapshotStore:
    """A SnapshotStore at `root` whose finished snapshots are mirrored to `mirror`'s bucket."""
    store = SnapshotStore(root, **store_options)
    store.sync = MirrorSync(
        store, mirror, refresh_interval_s=refresh_interval_s, retry_max_s=retry_max_s
    )
    return store


class MirrorSync:
    def __init__(
        self,
        store: SnapshotStore,
        mirror: ObjectStoreMirror,
        *,
        refresh_interval_s: float = 10.0,
        retry_max_s: float = 300.0,
    ):
        self.store = store
        self.mirror = mirror
        self.pending_dir = store.root / ".mirror"
        self.refresh_interval_s = refresh_interval_s
        self.retry_max_s = retry_max_s
        self.uploads_total = 0
        self.upload_failures_total = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._busy = threading.Lock()  # held while one marker is processed
        self._refresh_lock = threading.Lock()
        self._last_refresh = -math.inf
        self.last_refresh: RefreshStats | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        pending = self.pending_count()
        if pending:
            log.info("%d snapshot(s) wait for upload to %s", pending, self.mirror.url)
        self._thread = threading.Thread(target=self._run, name="store-mirror", daemon=True)
        self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(15)

    # ---- the queue -------------------------------------------------------------------------

    def _marker(self, snapshot_id: str, kind: str):
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
            return
        self._wake.set()

    def delete(self, snapshot_id: str) -> None:
        """Remove a snapshot from the bucket (after any upload of it in progress)."""
        with self._busy:
            self._marker(snapshot_id, UPLOAD).unlink(missing_ok=True)
            try:
                self.mirror.delete(snapshot_id)
            except Exception as exc:
                log.warning(
                    "could not delete snapshot %s from %s (%s); retrying later",
                    snapshot_id,
                    self.mirror.url,
                    _brief(exc),
                )
                with contextlib.suppress(OSError):
                    self.pending_dir.mkdir(parents=True, exist_ok=True)
                    self._marker(snapshot_id, DELETE).touch()
                self._wake.set()

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.is_set():
            self._wake.wait(delay or None)
            self._wake.clear()
            if self._stop.is_set():
                break
            if self.sync_pending():
                delay = 0.0
            else:
                delay = min(max(2 * delay, 1.0), self.retry_max_s)
                log.info("next upload attempt to %s in %g s", self.mirror.url, delay)

    def sync_pending(self) -> bool:
        """One pass over the queue; False when the bucket refused (the rest waits)."""
        try:
            markers = sorted(self.pending_dir.iterdir())
        except FileNotFoundError:
            return True
        for marker in markers:
            if self._stop.is_set():
                return True  # shutting down: the rest waits for the next start
            snapshot_id, _, kind = marker.name.rpartition(".")
            if not is_snapshot_id(snapshot_id) or kind not in (UPLOAD, DELETE):
                marker.unlink(missing_ok=True)
                continue
            with self._busy:
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
                    if kind == UPLOAD and self._local(snapshot_id) is None:
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
                # Re-queued (a pin) while this ran: keep the marker for the next pass.
                with contextlib.suppress(FileNotFoundError):
                    if marker.stat().st_mtime_ns == stamp:
                        marker.unlink()
        return True

    def _local(self, snapshot_id: str) -> tuple[Snapshot, IndexEntry] | None:
        entry = self.store.index.entries().get(snapshot_id)
        snapshot = self.store.index.get(snapshot_id)
        if entry is None or snapshot is None or entry.location in (REMOTE, "staging"):
            return None
        return snapshot, entry

    def _upload(self, snapshot_id: str) -> None:
        local = self._local(snapshot_id)
        if local is None:
            return
        snapshot, entry = local
        directory = self.store._dir_of(snapshot_id, entry.location)
        if entry.location != "ready":
            directory = directory / "run"
        started = time.monotonic()
        sent = self.mirror.upload_snapshot(directory, snapshot)
        self.uploads_total += 1
        log.info(
            "snapshot %s uploaded to %s (%d bytes in %.1f s)",
            snapshot_id,
            self.mirror.url,
            sent,
            time.monotonic() - started,
        )

    # ---- retention -------------------------------------------------------------------------

    def retention_view(self, entries: Iterable[IndexEntry]) -> list[IndexEntry]:
        """What local retention may count and evict: local snapshots; pending ones are kept."""
        pending = self._pending(UPLOAD)
        return [
            replace(e, pinned=True) if e.id in pending else e
            for e in entries
            if e.location != REMOTE
        ]

    def evicted(self, snapshot: Snapshot) -> None:
        """An uploaded snapshot left the local cache: it is still listed, from the bucket."""
        self.store.index.upsert(
            snapshot, location=REMOTE, size_bytes=snapshot.size_bytes, doc_mtime_ns=0
        )

    # ---- reading the bucket ----------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> RefreshStats | None:
        """Index what other sidecars wrote; drop remote entries gone from the bucket.

        At most once per `refresh_interval_s` (also after a failure), and never two at once: a
        request that finds a refresh running is answered from the cache. Only new and rewritten
        `snapshot.json` files are read (their ETag changed), `REFRESH_BATCH` at a time, each batch
        indexed in one transaction: the fleet hub's first sync of a large bucket stays bounded in
        memory. Returns what changed, or None when it did not run or the bucket did not answer.
        """
        if not force and time.monotonic() - self._last_refresh < self.refresh_interval_s:
            return None
        if not self._refresh_lock.acquire(blocking=False):
            return None
        try:
            started = self._last_refresh = time.monotonic()
            remote = self.mirror.list_snapshots()
            listed_s = time.monotonic() - started
            deleting = self._pending(DELETE)
            indexed = self.store.index.entries()
            wanted = [
                e
                for e in remote.values()
                if e.id not in deleting
                and (
                    (current := indexed.get(e.id)) is None
                    or (current.location == REMOTE and current.doc_mtime_ns != e.version)
                )
            ]
            stats = RefreshStats(listed=len(remote), listed_s=listed_s)
            for first in range(0, len(wanted), REFRESH_BATCH):
                batch = wanted[first : first + REFRESH_BATCH]
                read_from = time.monotonic()
                docs = self.mirror.read_docs(batch)
                stats.read_s += time.monotonic() - read_from
                with self.store._lock:
                    indexed = self.store.index.entries()
                    rows = [
                        row
                        for e in batch
                        if (row := self._remote_row(e, docs.get(e.id), indexed.get(e.id)))
                    ]
                    self.store.index.upsert_many(rows)
                stats.indexed += len(rows)
            with self.store._lock:
                for snapshot_id, entry in self.store.index.entries().items():
                    if entry.location == REMOTE and snapshot_id not in remote:
                        self.store.index.remove(snapshot_id)
                        stats.removed += 1
            stats.duration_s = time.monotonic() - started
            self.last_refresh = stats
            return stats
        except Exception as exc:
            log.warning("could not list %s: %s", self.mirror.url, _brief(exc))
            return None
        finally:
            self._refresh_lock.release()

    def _remote_row(
        self, entry: RemoteEntry, data: bytes | None, current: IndexEntry | None
    ) -> tuple[Snapshot, str, int, int] | None:
        if data is None or (current is not None and current.location != REMOTE):
            return None  # vanished meanwhile, or our own local copy (which wins)
        try:
            snapshot = Snapshot.model_validate_json(data)
        except ValueError as exc:
            log.warning("skipping unreadable snapshot.json of %s in the bucket: %s", entry.id, exc)
            return None
        if snapshot.id != entry.id or snapshot.status.in_flight:
            return None
        return snapshot, REMOTE, snapshot.size_bytes, entry.version

    def _index_remote(
        self, entry: RemoteEntry, data: bytes | None, current: IndexEntry | None
    ) -> Snapshot | None:
        row = self._remote_row(entry, data, current)
        if row is None:
            return None
        self.store.index.upsert_many([row])
        return row[0]

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
        with self.store._lock:
            return self._index_remote(entry, data, self.store.index.entries().get(snapshot_id))

    def is_remote(self, snapshot_id: str) -> bool:
        entry = self.store.index.entries().get(snapshot_id)
        return entry is not None and entry.location == REMOTE

    def update_remote(self, snapshot: Snapshot) -> None:
        """Rewrite a remote-only snapshot's `snapshot.json` in the bucket (a pin)."""
        try:
            self.mirror.write_doc(snapshot)
        except Exception as exc:
            raise StoreNotWritable(
                f"snapshot {snapshot.id} is only in {self.mirror.url}, which did not take the "
                f"change: {_brief(exc)}"
            ) from exc
        self.store.index.upsert(
            snapshot, location=REMOTE, size_bytes=snapshot.size_bytes, doc_mtime_ns=0
        )

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


def _brief(exc: BaseException) -> str:
    """One line: backends put whole tracebacks and request dumps in their messages."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
