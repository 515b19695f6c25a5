"""The hub's snapshot reads (api/core.py's `SnapshotReader`) over its fleet index: listings
from the index's columns, a whole snapshot and its files from the bucket.

`get` reads `snapshot.json` from the bucket at the location and version the index holds (a
small cache keeps the last few read, keyed by version, so a rewritten one is read again). An
id the index does not know yet (taken since the last sync) is looked up in the bucket and
indexed; one the bucket no longer holds leaves the index at once.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from profiler_service.errors import (
    BucketUnreachable,
    FileNotFound,
    IndexUnavailable,
    SnapshotNotFound,
    StoreNotWritable,
)
from profiler_service.hub.index.database import FleetDatabase
from profiler_service.hub.index.fleet_queries import FleetQueries
from profiler_service.hub.index.queries import IndexQueries
from profiler_service.hub.index.writes import IndexWrites
from profiler_service.models import Snapshot, utcnow
from profiler_service.store.bucket_catalogue import brief, parse_remote
from profiler_service.store.bucket_client import BucketClient, RemoteEntry
from profiler_service.store.index import SnapshotQuery

__all__ = ["HubSnapshots"]

log = logging.getLogger(__name__)

CACHED_DOCS = 64  # whole snapshots kept (20-40 KB each): a report and its baseline, re-read
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")


class HubSnapshots:
    def __init__(self, db: FleetDatabase, bucket: BucketClient):
        self.db = db
        self.bucket = bucket
        self.writes = IndexWrites(db)
        self.listing = IndexQueries(db)
        self.fleet = FleetQueries(db)  # the fleet view's reads
        self._cache: OrderedDict[tuple[str, int], Snapshot] = OrderedDict()
        self._lock = threading.Lock()
        self.down_since: datetime | None = None  # the index's first failure of this outage

    def unavailable(self, exc: Exception) -> IndexUnavailable:
        """Note that the index failed (from when, once an outage); what the API answers."""
        if self.down_since is None:
            self.down_since = utcnow()
            log.warning("the fleet index does not answer: %s", brief(exc))
        return IndexUnavailable(
            f"the fleet index (its database) does not answer since "
            f"{self.down_since:%Y-%m-%d %H:%M:%S} UTC: listings and the fleet view wait for it; "
            "a snapshot by id, its report and its files answer from the bucket"
        )

    def answered(self) -> None:
        """The index answered: an outage, if one was noted, is over."""
        if self.down_since is not None:
            log.warning("the fleet index answers again (down since %s)", self.down_since)
            self.down_since = None

    def get(self, snapshot_id: str) -> Snapshot:
        try:
            where = self.writes.locate(snapshot_id)
        except SQLAlchemyError as exc:  # the index is down: the bucket still has it
            self.unavailable(exc)
            return self._unindexed(snapshot_id)
        self.answered()
        if where is None:
            return self._unindexed(snapshot_id)
        key = (snapshot_id, where[1])
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        entry = RemoteEntry(snapshot_id, *where)
        with _bucket(snapshot_id):
            found = parse_remote(entry, self.bucket.read_docs([entry]).get(snapshot_id))
        if found is None:  # deleted (or moved) since the last sync
            with suppress(SQLAlchemyError):  # the next sync removes it otherwise
                self.writes.remove([snapshot_id])
            return self._unindexed(snapshot_id)
        with self._lock:
            self._cache[key] = found.snapshot
            while len(self._cache) > CACHED_DOCS:
                self._cache.popitem(last=False)
        return found.snapshot

    def _unindexed(self, snapshot_id: str) -> Snapshot:
        with _bucket(snapshot_id):
            read = self.bucket.read_doc(snapshot_id)
        found = parse_remote(*read) if read else None
        if found is None:
            raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
        try:
            self.writes.upsert([found])
        except SQLAlchemyError as exc:  # indexed by the next sync once it is back
            self.unavailable(exc)
        return found.snapshot

    def list_docs(self, query: SnapshotQuery) -> tuple[list[str], int]:
        try:
            found = self.listing.list_items(query)
        except SQLAlchemyError as exc:
            raise self.unavailable(exc) from None
        self.answered()
        return found

    def file_path(self, snapshot_id: str, name: str) -> Path:
        """The hub holds no files: every one streams from the bucket (`remote_file`)."""
        raise FileNotFound(f"snapshot {snapshot_id} has no local file {name!r}")

    def remote_file(self, snapshot_id: str, name: str) -> tuple[int, Iterator[bytes]]:
        snapshot = self.get(snapshot_id)
        # The name is used in a bucket path and a header: a plain file name of this snapshot.
        if (
            _PLAIN_NAME.fullmatch(name)
            and ".." not in name
            and name in {f.name for f in snapshot.files}
        ):
            with _bucket(snapshot_id):
                size = self.bucket.file_size(snapshot, name)
            if size is not None:
                return size, self.bucket.open_file(snapshot, name)
        raise FileNotFound(f"snapshot {snapshot_id} has no file {name!r}")

    def check_writable(self) -> None:
        """The index answers (the hub writes nothing else)."""
        try:
            self.db.ping()
        except SQLAlchemyError as exc:  # its URL and the driver's text go to the log only
            raise StoreNotWritable(self.unavailable(exc).detail) from None
        self.answered()


@contextmanager
def _bucket(snapshot_id: str) -> Iterator[None]:
    """What the bucket raised, as the API's 503 (the listings, from the index, still work)."""
    try:
        yield
    except Exception as exc:
        raise BucketUnreachable(
            f"could not read {snapshot_id} from the fleet's bucket: {brief(exc)}"
        ) from None
