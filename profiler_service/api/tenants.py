"""A tenant's view of the snapshots: the reads a route gets, held to the request's reach.

`deps.get_reader` hands every route that reads snapshots a `ScopedReader` when the request's
token reaches only some namespaces (profiler_service/tenancy.py), so a route cannot forget to
check: another namespace's snapshot is not found, with the sentence an absent one gets, through
the JSON, the report, the files and the listing alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from profiler_service.api.core import SnapshotReader
from profiler_service.errors import SnapshotNotFound
from profiler_service.models import Snapshot
from profiler_service.store import SnapshotQuery
from profiler_service.tenancy import Reach

__all__ = ["ScopedReader"]


class ScopedReader:
    """A `SnapshotReader` held to a reach: another namespace's snapshot is not found, with the
    sentence an absent one gets, and listings only ever hold the reach's namespaces."""

    def __init__(self, reader: SnapshotReader, reach: Reach):
        self.reader, self.reach = reader, reach

    def get(self, snapshot_id: str) -> Snapshot:
        snapshot = self.reader.get(snapshot_id)
        if not self.reach.allows(snapshot.namespace):
            raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
        return snapshot

    def list_docs(self, query: SnapshotQuery) -> tuple[list[str], int]:
        if query.namespace is not None and not self.reach.allows(query.namespace):
            return [], 0
        return self.reader.list_docs(dataclasses.replace(query, namespaces=self.reach.namespaces))

    def file_path(self, snapshot_id: str, name: str) -> Path:
        self.get(snapshot_id)
        return self.reader.file_path(snapshot_id, name)

    def remote_file(self, snapshot_id: str, name: str) -> tuple[int, Iterator[bytes]]:
        self.get(snapshot_id)
        return self.reader.remote_file(snapshot_id, name)

    def check_writable(self) -> None:
        self.reader.check_writable()
