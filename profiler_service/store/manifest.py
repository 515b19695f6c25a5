"""A sidecar's manifest: every snapshot.json it keeps in the bucket, in one object.

    URL/manifests/<namespace>.<pod>.jsonl.gz   a line a snapshot: `<id> <location> <version> <doc>`

A reader of a large bucket (the hub's first sync, a new replica, a sidecar listing the fleet)
reads one object per sidecar instead of one per snapshot: on an S3 API that serves a hundred
requests a second, 10,000 snapshots from 500 sidecars are 500 reads, not 10,000. The `version`
of each line is the version (ETag-derived) of the `snapshot.json` the sidecar wrote, as a listing
of the bucket reports it, so a reader takes a line only for the very object it listed; anything
else (a line older than its object, a snapshot in no manifest, a sidecar that writes none) is
read from its `snapshot.json` as before. The snapshot.json files stay the truth: the manifest
only saves reads, and a lost or stale manifest costs time, never correctness.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiler_service.store.bucket_client import BucketClient, RemoteEntry

__all__ = [
    "MANIFESTS_PREFIX",
    "ManifestEntry",
    "ManifestReader",
    "decode",
    "encode",
    "manifest_path",
    "sidecar_key",
]

MANIFESTS_PREFIX = "manifests"
MANIFEST_BATCH = 16  # manifests read at a time (each up to a sidecar's retention of docs)


@dataclass(frozen=True)
class ManifestEntry:
    id: str
    location: str  # ready or failed, as in the bucket's layout
    version: int  # the listed version of its snapshot.json when this doc was written
    doc: str  # the snapshot.json, compact, on one line


def sidecar_key(pod: str, namespace: str | None) -> str:
    """How a sidecar's objects beside the snapshots are named (as its registration record)."""
    return f"{namespace or '_'}.{pod}"


def manifest_path(sidecar: str) -> str:
    return f"{MANIFESTS_PREFIX}/{sidecar}.jsonl.gz"


def encode(entries: Iterable[ManifestEntry]) -> bytes:
    lines = (f"{e.id} {e.location} {e.version} {e.doc}\n" for e in entries)
    return gzip.compress("".join(lines).encode(), compresslevel=6)


def decode(data: bytes) -> Iterator[ManifestEntry]:
    """Each well-formed line; a truncated or foreign object yields what it can (or nothing)."""
    try:
        text = gzip.decompress(data).decode()
    except (OSError, EOFError, UnicodeDecodeError):
        return
    for line in text.splitlines():
        snapshot_id, location, version, doc = [*line.split(" ", 3), "", "", ""][:4]
        if doc.startswith("{") and version.isdigit():
            yield ManifestEntry(snapshot_id, location, int(version), doc)


class ManifestReader:
    """The manifests of a bucket, each read again only when its version changed."""

    def __init__(self, mirror: BucketClient, own: str | None = None):
        self.mirror = mirror
        self.own = own  # a sidecar's own manifest: what it lists it holds already
        # path -> version last read (the hub keeps them in its index between syncs)
        self.versions: dict[str, int] = {}

    def matching(
        self, wanted: dict[str, RemoteEntry], stats: Any
    ) -> Iterator[list[tuple[RemoteEntry, str]]]:
        """Batches of (listed entry, its doc) for the lines of changed manifests whose version
        is the one listed; counts `stats.manifests` and `stats.read_s`."""
        listed = self.mirror.list_records(MANIFESTS_PREFIX)
        self.versions = {p: v for p, v in self.versions.items() if p in listed}
        changed = [
            p for p, v in sorted(listed.items()) if self.versions.get(p) != v and p != self.own
        ]
        seen: set[str] = set()
        for first in range(0, len(changed), MANIFEST_BATCH):
            paths = changed[first : first + MANIFEST_BATCH]
            started = time.monotonic()
            data = self.mirror.read_paths(paths)
            stats.read_s += time.monotonic() - started
            stats.manifests += len(data)
            batch = []
            for path in paths:
                for entry in decode(data.get(path, b"")):
                    want = wanted.get(entry.id)
                    if (
                        want is not None
                        and entry.id not in seen
                        and ((want.version, want.location) == (entry.version, entry.location))
                    ):
                        seen.add(entry.id)
                        batch.append((want, entry.doc))
                if path in data:
                    self.versions[path] = listed[path]
            yield batch
