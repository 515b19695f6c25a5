"""The upload queue: every finished snapshot of this store copied to the bucket, every deleted
one removed from it, and this sidecar's manifest and baselines kept beside them.

The store tells (events.py): each change reaches `store_changed()` after the store's lock is
released, and only queues work here. Every finished snapshot is queued (a marker file
`STORE/.mirror/<id>.upload`, so a restart keeps the queue) and copied by one background thread;
a failure (bucket down) leaves the snapshot ready locally and the marker in place, and is retried
with a growing delay (1 s, 2 s, ... up to `retry_max_s`), at once on the next change, and at the
next start. A queued snapshot is held from local retention (`store.hold`) until its copy is made.
A pin is queued the same way (for a remote-only snapshot only its `snapshot.json` is rewritten).
Deletes are queued too (`STORE/.mirror/<id>.delete`, by the catalogue, bucket_catalogue.py),
done by the same thread and retried like an upload.

Manifests (manifest.py): after each pass of the queue, a sidecar rewrites its manifest, the
`snapshot.json` of every snapshot it holds and has copied, each with the version the bucket gave
it, and copies its baselines (`SidecarRecords`); the hub's catalogue reads them on a first sync.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.models import is_snapshot_id
from profiler_service.store.bucket_catalogue import BucketCatalogue, brief
from profiler_service.store.events import StoreEvent, StoreEventKind
from profiler_service.store.sidecar_records import SidecarRecords
from profiler_service.store.snapshot_store import SnapshotStore

if TYPE_CHECKING:
    from profiler_service.store.bucket_client import BucketClient

__all__ = ["UploadQueue"]

log = logging.getLogger(__name__)

UPLOAD, DELETE = "upload", "delete"


class UploadQueue(LoopOwner):
    def __init__(
        self,
        store: SnapshotStore,
        bucket: BucketClient,
        catalogue: BucketCatalogue,
        *,
        retry_max_s: float = 300.0,
        sidecar: str | None = None,
    ):
        self.store = store
        self.bucket = bucket
        self.catalogue = catalogue
        self.pending_dir = store.root / ".mirror"
        self.retry_max_s = retry_max_s
        self.uploads_total = 0
        self.upload_failures_total = 0
        self._wake = threading.Event()
        self._retry_s = 0.0  # the loop's wait after a refused pass
        self._loop = BackgroundLoop("store-mirror", self._round, wake=self._wake, join_s=15)
        self.records = SidecarRecords(store, bucket, catalogue, self.uploading, sidecar)

    # ---- lifecycle -------------------------------------------------------------------------

    def attach(self) -> None:
        """Hold what still waits for upload from a previous run (before `store.open()`, whose
        recovery applies retention)."""
        for snapshot_id in self.uploading():
            self.store.hold(snapshot_id)

    def start(self) -> None:
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        pending = self.pending_count()
        if pending:
            log.info("%d snapshot(s) wait for upload to %s", pending, self.bucket.url)
        self._loop.start()
        self._wake.set()

    def store_changed(self, event: StoreEvent) -> None:
        """Queue the bucket's side of a change (deletes: the catalogue queues them); never
        waits."""
        if event.kind in (StoreEventKind.PUBLISHED, StoreEventKind.UPDATED):
            self.queue_upload(event.snapshot.id)
        elif event.kind is StoreEventKind.EVICTED and self.records.evicted():
            self._wake.set()  # it leaves our manifest

    # ---- the queue -------------------------------------------------------------------------

    def _marker(self, snapshot_id: str, kind: str) -> Path:
        return self.pending_dir / f"{snapshot_id}.{kind}"

    def _pending(self, kind: str) -> set[str]:
        try:
            names = [p.name for p in self.pending_dir.iterdir()]
        except FileNotFoundError:
            return set()
        return {n.removesuffix(f".{kind}") for n in names if n.endswith(f".{kind}")}

    def uploading(self) -> set[str]:
        return self._pending(UPLOAD)

    def deleting(self) -> set[str]:
        return self._pending(DELETE)

    def pending_count(self) -> int:
        return len(self.uploading())

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

    def _round(self) -> float | None:
        """One pass over the queue, the manifest and the baselines; None (until woken) when
        the bucket took it all, else the next attempt's wait, doubling up to `retry_max_s`."""
        self._wake.clear()
        records = self.records
        if (
            records.read_back_manifest()
            and self.sync_pending()
            and records.write_manifest()
            and records.copy_baselines()
        ):
            self._retry_s = 0.0
            return None
        self._retry_s = min(max(2 * self._retry_s, 1.0), self.retry_max_s)
        log.info("next upload attempt to %s in %g s", self.bucket.url, self._retry_s)
        return self._retry_s

    def sync_pending(self) -> bool:
        """One pass over the queue; False when the bucket refused (the rest waits)."""
        try:
            markers = sorted(self.pending_dir.iterdir())
        except FileNotFoundError:
            return True
        for marker in markers:
            if self._loop.stopping.is_set():
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
                    self.bucket.delete(snapshot_id)
            except Exception as exc:
                if kind == UPLOAD and self.store.stored(snapshot_id) is None:
                    marker.unlink(missing_ok=True)  # deleted locally while uploading
                    continue
                self.upload_failures_total += 1
                log.warning(
                    "%s of snapshot %s to %s failed (%d pending, %d failures so far): %s",
                    kind,
                    snapshot_id,
                    self.bucket.url,
                    self.pending_count(),
                    self.upload_failures_total,
                    brief(exc),
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
            entry = self.bucket.write_doc(stored.snapshot)
            sent = 0
        else:
            sent, entry = self.bucket.upload_snapshot(stored.files_dir, stored.snapshot)
        self.records.uploaded(entry, stored.snapshot)
        self.uploads_total += 1
        log.info(
            "snapshot %s uploaded to %s (%d bytes in %.1f s)",
            snapshot_id,
            self.bucket.url,
            sent,
            time.monotonic() - started,
        )
