"""What the store reads from the bucket (snapshot_store.py's `RemoteReader`): a snapshot another
sidecar wrote that no listing has indexed yet, and the bytes of a file the store holds only
there. The hub and the sidecar read the same way; `catalogued_store` wires a store to read a
bucket (the hub's whole use of it; a sidecar adds its upload queue, mirror_sync.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from profiler_service.models import Snapshot
from profiler_service.store.bucket_catalogue import BucketCatalogue, brief, parse_remote
from profiler_service.store.snapshot_store import SnapshotStore

if TYPE_CHECKING:
    from profiler_service.store.bucket_client import BucketClient

__all__ = ["BucketReader", "catalogued_store"]

log = logging.getLogger(__name__)


class BucketReader:
    def __init__(self, bucket: BucketClient, catalogue: BucketCatalogue):
        self.bucket = bucket
        self.catalogue = catalogue

    def listing_requested(self) -> None:
        self.catalogue.listing_requested()

    def fetch(self, snapshot_id: str) -> Snapshot | None:
        """A snapshot this index does not know yet, read straight from the bucket and indexed."""
        if self.catalogue.deleting(snapshot_id):
            return None
        try:
            found = self.bucket.read_doc(snapshot_id)
        except Exception as exc:
            log.warning("could not read %s from %s: %s", snapshot_id, self.bucket.url, brief(exc))
            return None
        if found is None:
            return None
        parsed = parse_remote(*found)
        if parsed is None:
            return None
        return parsed.snapshot if self.catalogue.index([parsed]) else None

    def stream(self, snapshot: Snapshot, name: str) -> tuple[int, Iterator[bytes]] | None:
        """(size, chunks) of one file of a snapshot, from the bucket; None when it is not there."""
        try:
            size = self.bucket.file_size(snapshot, name)
        except Exception as exc:
            log.warning("could not reach %s for %s: %s", self.bucket.url, name, brief(exc))
            return None
        if size is None:
            return None
        return size, self.bucket.open_file(snapshot, name)


def catalogued_store(
    root: Path,
    bucket: BucketClient,
    *,
    refresh_interval_s: float = 10.0,
    own_manifest: str | None = None,
    **store_options: int,
) -> tuple[SnapshotStore, BucketCatalogue]:
    """A SnapshotStore at `root` that indexes what the bucket holds and reads it from there
    (open the store, then start the catalogue if it lists by itself)."""
    store = SnapshotStore(root, **store_options)
    catalogue = BucketCatalogue(
        store, bucket, refresh_interval_s=refresh_interval_s, own_manifest=own_manifest
    )
    store.subscribe(catalogue)
    store.attach_remote(BucketReader(bucket, catalogue))
    return store, catalogue
