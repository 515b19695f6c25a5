"""A local SnapshotStore kept in step with a bucket, by three parts that share no lock with it:

- the upload queue (upload_queue.py): markers, holds, retries, our manifest and baselines;
- the bucket catalogue (bucket_catalogue.py): ours and the bucket's ids, the listing, the index;
- the bucket reader (bucket_reader.py): what the store reads from the bucket.

A sidecar runs all three (`mirrored_store`); the hub, which uploads nothing, only the catalogue
and the reader (bucket_reader.py's `catalogued_store`), and lists by its own fleet sync.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from profiler_service.lifecycle import BackgroundLoop
from profiler_service.store.bucket_catalogue import BucketCatalogue, RefreshStats
from profiler_service.store.bucket_reader import catalogued_store
from profiler_service.store.events import REMOTE
from profiler_service.store.manifest import manifest_path
from profiler_service.store.snapshot_store import SnapshotStore
from profiler_service.store.upload_queue import UploadQueue

if TYPE_CHECKING:
    from profiler_service.store.bucket_client import BucketClient

__all__ = ["REMOTE", "MirrorSync", "RefreshStats", "catalogued_store", "mirrored_store"]


class MirrorSync:
    """The sidecar's three parts, started and stopped together (upload first)."""

    def __init__(self, queue: UploadQueue, catalogue: BucketCatalogue):
        self.queue = queue
        self.catalogue = catalogue
        self.bucket = catalogue.bucket

    @property
    def loops(self) -> tuple[BackgroundLoop, ...]:
        return self.queue.loops + self.catalogue.loops

    def start(self) -> None:
        self.queue.start()
        self.catalogue.start()

    def stop(self, timeout_s: float | None = None) -> None:
        self.queue.stop(timeout_s)
        self.catalogue.stop(timeout_s)

    # What the metrics and tests read.
    def pending_count(self) -> int:
        return self.queue.pending_count()

    def is_pending(self, snapshot_id: str) -> bool:
        return self.queue.is_pending(snapshot_id)

    @property
    def uploads_total(self) -> int:
        return self.queue.uploads_total

    @property
    def upload_failures_total(self) -> int:
        return self.queue.upload_failures_total

    @property
    def last_refresh(self) -> RefreshStats | None:
        return self.catalogue.last_refresh

    def refresh(self, *, force: bool = False) -> RefreshStats | None:
        return self.catalogue.refresh(force=force)


def mirrored_store(
    root: Path,
    bucket: BucketClient,
    *,
    refresh_interval_s: float = 10.0,
    retry_max_s: float = 300.0,
    sidecar: str | None = None,
    **store_options: int,
) -> tuple[SnapshotStore, MirrorSync]:
    """A SnapshotStore at `root` and the MirrorSync that copies it to `bucket`, wired together
    (open the store, then start the sync; stop the sync, then close the store). `sidecar`
    (manifest.sidecar_key): the name of this sidecar's manifest and baselines in the bucket."""
    store, catalogue = catalogued_store(
        root,
        bucket,
        refresh_interval_s=refresh_interval_s,
        own_manifest=manifest_path(sidecar) if sidecar else None,
        **store_options,
    )
    queue = UploadQueue(store, bucket, catalogue, retry_max_s=retry_max_s, sidecar=sidecar)
    catalogue.own = queue
    store.subscribe(queue)
    queue.attach()
    return store, MirrorSync(queue, catalogue)
