"""What a sidecar keeps beside its snapshots in the bucket: its manifest (every `snapshot.json`
it holds and has copied, each with the version the bucket gave it: manifest.py) and its
baselines (baselines.py). The upload queue (upload_queue.py) writes them after each pass.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from profiler_service.models import Snapshot
from profiler_service.store.baselines import fleet_baselines_path
from profiler_service.store.bucket_catalogue import BucketCatalogue, brief
from profiler_service.store.manifest import ManifestEntry, decode, encode, manifest_path
from profiler_service.store.snapshot_store import SnapshotStore

if TYPE_CHECKING:
    from profiler_service.store.bucket_client import BucketClient, RemoteEntry

__all__ = ["SidecarRecords"]

log = logging.getLogger(__name__)


class SidecarRecords:
    def __init__(
        self,
        store: SnapshotStore,
        bucket: BucketClient,
        catalogue: BucketCatalogue,
        uploading: Callable[[], set[str]],
        sidecar: str | None,
    ):
        """`sidecar` (manifest.sidecar_key): the name of its manifest and baselines; None
        keeps neither. `uploading`: what the queue has still to copy (not in the manifest)."""
        self.store = store
        self.bucket = bucket
        self.catalogue = catalogue
        self.uploading = uploading
        self._lock = threading.Lock()
        self.manifest = manifest_path(sidecar) if sidecar else None
        self.baselines_path = fleet_baselines_path(sidecar) if sidecar else None
        self._baselines_copied: dict[str, str] | None = None
        self._written: dict[str, ManifestEntry] | None = None  # None: not read back yet
        self._manifest_dirty = sidecar is not None

    def evicted(self) -> bool:
        """A snapshot left the store: it leaves the manifest too. True when there is one."""
        if self.manifest is None:
            return False
        with self._lock:
            self._manifest_dirty = True
        return True

    def uploaded(self, entry: RemoteEntry, snapshot: Snapshot) -> None:
        """A copy was made: its line, with the version the bucket gave it."""
        if self.manifest is None:
            return
        written = ManifestEntry(entry.id, entry.location, entry.version, snapshot.model_dump_json())
        with self._lock:
            if self._written is not None:
                self._written[entry.id] = written
            self._manifest_dirty = True

    def write_manifest(self) -> bool:
        """Rewrite our manifest if what we hold and copied changed; False when the bucket
        refused (retried with the queue)."""
        if self.manifest is None or not self._manifest_dirty:
            return True
        try:
            local = self.catalogue.local_ids()
            pending = self.uploading()
            with self._lock:
                self._manifest_dirty = False
                entries = [
                    e
                    for i, e in sorted((self._written or {}).items())
                    if i in local and i not in pending
                ]
            self.bucket.put_record(self.manifest, encode(entries))
        except Exception as exc:
            self._manifest_dirty = True
            log.warning("could not write the manifest to %s: %s", self.bucket.url, brief(exc))
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
            self.bucket.put_record(self.baselines_path, json.dumps(doc, sort_keys=True).encode())
        except Exception as exc:
            log.warning("could not copy the baselines to %s: %s", self.bucket.url, brief(exc))
            return False
        self._baselines_copied = baselines
        return True

    def read_back_manifest(self) -> bool:
        """Once, before the first copies: the lines of our last manifest still true (held,
        copied as is), so a restart does not drop them. False when the bucket refused."""
        if self.manifest is None or self._written is not None:
            return True
        try:
            data = self.bucket.read_paths([self.manifest]).get(self.manifest, b"")
        except Exception as exc:
            log.warning("could not read the manifest from %s: %s", self.bucket.url, brief(exc))
            return False
        local = self.catalogue.local_ids()
        pending = self.uploading()
        with self._lock:
            self._written = {e.id: e for e in decode(data) if e.id in local and e.id not in pending}
        return True
