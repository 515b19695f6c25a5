"""The bucket client: every finished snapshot copied to one bucket that many sidecars share.

    URL/plugins/profile/<id>/<host>.xplane.pb   ready snapshots, the TensorBoard/XProf layout
    URL/plugins/profile/<id>/snapshot.json      written last: a prefix without it is absent
    URL/failed/<id>/snapshot.json               failed and interrupted records
    URL/failed/<id>/run/<host>.xplane.pb        the whole files an analysis failure kept
    URL/manifests/<namespace>.<pod>.jsonl.gz    a sidecar's snapshot.json files in one (manifest.py)

`URL` is any fsspec URL (`s3://bucket/prefix`, `gs://bucket/prefix`, `file:///shared/dir`). Each
object is written whole (a PUT), the capture files first and `snapshot.json` last, so a reader
that goes by `snapshot.json` never sees half a snapshot; a delete removes `snapshot.json` first.
The local store (`snapshot_store.py`) stays the place captures are written and analysed; this
class only talks to the bucket and knows nothing of the index.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import fsspec

from profiler_service.models import Snapshot, SnapshotStatus, is_snapshot_id

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "snapshot.json"
READY, FAILED = "ready", "failed"
CHUNK_BYTES = 1024 * 1024

# Fail fast when the bucket is down (botocore's defaults retry for ~10 s per call); the
# store retries pending uploads itself. Only applied when the options set no `config_kwargs`.
_S3_DEFAULT_CONFIG = {
    "connect_timeout": 5,
    "read_timeout": 60,
    "retries": {"max_attempts": 3, "mode": "standard"},
}


@dataclass(frozen=True)
class RemoteEntry:
    """A complete snapshot in the bucket: where its `snapshot.json` is and which version."""

    id: str
    location: str  # READY (plugins/profile) or FAILED (failed/)
    version: int  # changes whenever snapshot.json is rewritten (ETag, else mtime)


class BucketFiles:
    """One bucket prefix as files: its fsspec filesystem, listings (whole, or from a name on),
    and the small records kept beside the snapshots (registrations, manifests, baselines).
    Every method may raise what the backend raises."""

    def __init__(self, url: str, options: dict[str, Any] | None = None):
        self.url = url.rstrip("/")
        options = dict(options or {})
        protocol = fsspec.core.split_protocol(self.url)[0] or "file"
        if protocol in ("s3", "s3a") and "config_kwargs" not in options:
            options["config_kwargs"] = copy.deepcopy(_S3_DEFAULT_CONFIG)  # botocore edits it
        # Our own instance: listings must never come from a cache shared with other code.
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, skip_instance_cache=True, **options)
        except ImportError as exc:  # s3fs / gcsfs missing
            raise ValueError(
                f"PROFILER_STORE_URL {self.url}: {exc} (install this project's s3 or gs extra: "
                "pip install '.[sidecar,s3]')"
            ) from None
        self.root = root.rstrip("/")
        self.protocol = protocol

    def __repr__(self) -> str:  # never the options: they may hold credentials
        return f"BucketClient({self.url!r})"

    def _ensure_dir(self, path: str) -> None:
        """Directories exist only on filesystems; on object stores makedirs would even create
        a missing bucket, which is the operator's job (with its region, policy, lifecycle)."""
        if self.protocol in ("file", "local"):
            self.fs.makedirs(path, exist_ok=True)

    def put_record(self, relpath: str, data: bytes) -> None:
        """Write `URL/<relpath>` whole (e.g. `sidecars/<namespace>.<name>.json`)."""
        path = f"{self.root}/{relpath}"
        self._ensure_dir(posixpath.dirname(path))
        self.fs.pipe_file(path, data)

    def read_records(self, prefix: str) -> dict[str, bytes]:
        """Every object under `URL/<prefix>/`, by its path relative to URL (listed afresh,
        never from a cache)."""
        self.fs.invalidate_cache(f"{self.root}/{prefix}")
        found = self._find(f"{self.root}/{prefix}")
        data = self.fs.cat(list(found), on_error="omit") if found else {}
        return {self._relative(path): value for path, value in data.items()}

    def list_records(self, prefix: str) -> dict[str, int]:
        """Every object under `URL/<prefix>/`: its path relative to URL, and its version."""
        base = f"{self.root}/{prefix}"
        self.fs.invalidate_cache(base)
        return {
            self._relative(path): _version(info)
            for path, info in self._find(base, detail=True).items()
        }

    def _relative(self, path: str) -> str:
        """A path fsspec answered (with or without its protocol) relative to URL."""
        return posixpath.relpath(self.fs._strip_protocol(path), self.root)

    def read_paths(self, relpaths: list[str]) -> dict[str, bytes]:
        """The objects at these paths relative to URL (concurrently where fsspec can); a
        missing one is left out."""
        if not relpaths:
            return {}
        paths = {f"{self.root}/{p}": p for p in relpaths}
        data = self.fs.cat(list(paths), on_error="omit")
        return {paths[self.fs._strip_protocol(p)]: v for p, v in data.items()}

    def remove_record(self, relpath: str) -> None:
        path = f"{self.root}/{relpath}"
        if self.fs.exists(path):
            self.fs.rm_file(path)

    def _find_after(self, base: str, start_after: str | None) -> Iterator[tuple[str, Any]]:
        """(path, info) of every object under `base` whose name after it sorts after
        `start_after`."""
        if start_after and self.protocol in ("s3", "s3a"):
            yield from self._s3_list_after(base, start_after)
            return
        if start_after and self.protocol in ("file", "local"):  # the new directories only
            try:
                names = self.fs.ls(base, detail=False)
            except FileNotFoundError:
                return
            for directory in names:
                if posixpath.basename(directory) > start_after:
                    yield from self._find(directory, detail=True).items()
            return
        for path, info in self._find(base, detail=True).items():
            if (
                not start_after
                or posixpath.relpath(self.fs._strip_protocol(path), base) > start_after
            ):
                yield path, info

    def _s3_list_after(self, base: str, start_after: str) -> Iterator[tuple[str, Any]]:
        """ListObjectsV2 from `start_after` on, page by page (s3fs lists from the start)."""
        bucket, _, key = base.partition("/")
        prefix = f"{key}/" if key else ""
        token = None
        while True:
            ask = {"Bucket": bucket, "Prefix": prefix, "StartAfter": prefix + start_after}
            if token:
                ask["ContinuationToken"] = token
            page = self.fs.call_s3("list_objects_v2", **ask)
            for obj in page.get("Contents", []):
                yield f"{bucket}/{obj['Key']}", {"ETag": obj.get("ETag"), "size": obj.get("Size")}
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def _size(self, path: str) -> int | None:
        try:
            return int(self.fs.info(path)["size"])
        except FileNotFoundError:
            return None

    def _find(self, prefix: str, *, detail: bool = False) -> Any:
        try:
            return self.fs.find(prefix, withdirs=False, detail=detail)
        except FileNotFoundError:
            return {} if detail else []


class BucketClient(BucketFiles):
    """The snapshots in the bucket, in XProf's layout (this module's docstring)."""

    # ---- paths -----------------------------------------------------------------------------

    def _dir(self, snapshot_id: str, location: str) -> str:
        if not is_snapshot_id(snapshot_id):
            raise ValueError(f"not a snapshot id: {snapshot_id!r}")
        parent = "plugins/profile" if location == READY else "failed"
        return f"{self.root}/{parent}/{snapshot_id}"

    def _files_dir(self, snapshot_id: str, location: str) -> str:
        base = self._dir(snapshot_id, location)
        return base if location == READY else f"{base}/run"

    @staticmethod
    def location_of(snapshot: Snapshot) -> str:
        return READY if snapshot.status is SnapshotStatus.READY else FAILED

    # ---- writing ---------------------------------------------------------------------------

    def upload_snapshot(self, directory: Path, snapshot: Snapshot) -> tuple[int, RemoteEntry]:
        """Copy a finished snapshot's files, then its `snapshot.json`; returns bytes sent and
        the version of the `snapshot.json` written.

        `directory` holds the files (`plugins/profile/<id>` or `failed/<id>/run`). A file already
        in the bucket with the same size is not sent again, so a retry or a re-upload after a
        pin costs one small PUT.
        """
        location = self.location_of(snapshot)
        files_dir = self._files_dir(snapshot.id, location)
        self._ensure_dir(files_dir)
        sent = 0
        for f in snapshot.files:
            local = directory / f.name
            if not local.is_file():
                continue
            remote = f"{files_dir}/{f.name}"
            if self._size(remote) == local.stat().st_size:
                continue
            self.fs.put_file(str(local), remote)
            sent += local.stat().st_size
        entry = self.write_doc(snapshot)
        # A snapshot lives in one place: a record that moved from failed/ to ready (or back)
        # must not be listed twice.
        other = FAILED if location == READY else READY
        self._remove_prefix(self._dir(snapshot.id, other))
        return sent, entry

    def write_doc(self, snapshot: Snapshot) -> RemoteEntry:
        """Write `snapshot.json`; its version as a listing reports it (the manifest's)."""
        location = self.location_of(snapshot)
        directory = self._dir(snapshot.id, location)
        self._ensure_dir(directory)
        path = f"{directory}/{SNAPSHOT_FILE}"
        answer = self.fs.pipe_file(path, snapshot.model_dump_json(indent=2).encode())
        if not (isinstance(answer, dict) and answer.get("ETag")):  # S3's PUT tells its ETag
            self.fs.invalidate_cache(path)
            answer = self.fs.info(path)
        return RemoteEntry(snapshot.id, location, _version(answer))

    def delete(self, snapshot_id: str) -> None:
        """`snapshot.json` first (readers treat the rest as absent), then everything under it."""
        for location in (READY, FAILED):
            self._remove_prefix(self._dir(snapshot_id, location))

    def _remove_prefix(self, prefix: str) -> None:
        doc = f"{prefix}/{SNAPSHOT_FILE}"
        if self.fs.exists(doc):
            self.fs.rm_file(doc)
        paths = self._find(prefix)
        if paths:
            self.fs.rm(sorted(paths, reverse=True))
        if self.fs.exists(prefix):  # an empty directory on a real filesystem
            self.fs.rm(prefix, recursive=True)

    # ---- reading ---------------------------------------------------------------------------

    def list_snapshots(self, start_after: str | None = None) -> dict[str, RemoteEntry]:
        """Every complete snapshot in the bucket (a prefix without `snapshot.json` is absent).

        `start_after`: only the ids that sort after it (ids begin with the time they were taken:
        `20261205-231500` lists what was taken since). On S3 that is a listing from there
        (`StartAfter`), not of the whole bucket; elsewhere the whole listing, filtered."""
        self.fs.invalidate_cache()
        found: dict[str, RemoteEntry] = {}
        for location, parent in ((FAILED, "failed"), (READY, "plugins/profile")):
            base = f"{self.root}/{parent}"
            for path, info in self._find_after(base, start_after):
                rel = posixpath.relpath(self.fs._strip_protocol(path), base)
                snapshot_id, _, name = rel.partition("/")
                if name != SNAPSHOT_FILE or not is_snapshot_id(snapshot_id):
                    continue
                # ready wins over a stale failed record of the same id
                found[snapshot_id] = RemoteEntry(snapshot_id, location, _version(info))
        return found

    def read_docs(self, entries: list[RemoteEntry]) -> dict[str, bytes]:
        """The `snapshot.json` bytes of each entry (fetched concurrently where fsspec can)."""
        if not entries:
            return {}
        paths = {f"{self._dir(e.id, e.location)}/{SNAPSHOT_FILE}": e.id for e in entries}
        data = self.fs.cat(list(paths), on_error="omit")
        return {paths[self.fs._strip_protocol(p)]: v for p, v in data.items()}

    def read_doc(self, snapshot_id: str) -> tuple[RemoteEntry, bytes] | None:
        """One snapshot's `snapshot.json` straight from the bucket, or None."""
        for location in (READY, FAILED):
            path = f"{self._dir(snapshot_id, location)}/{SNAPSHOT_FILE}"
            try:
                info = self.fs.info(path)
                return RemoteEntry(snapshot_id, location, _version(info)), self.fs.cat_file(path)
            except FileNotFoundError:
                continue
        return None

    def file_size(self, snapshot: Snapshot, name: str) -> int | None:
        return self._size(f"{self._files_dir(snapshot.id, self.location_of(snapshot))}/{name}")

    def open_file(self, snapshot: Snapshot, name: str) -> Iterator[bytes]:
        """Stream one capture file of a snapshot, in 1 MiB chunks."""
        path = f"{self._files_dir(snapshot.id, self.location_of(snapshot))}/{name}"
        with self.fs.open(path, "rb") as f:
            while chunk := f.read(CHUNK_BYTES):
                yield chunk


def _version(info: dict[str, Any]) -> int:
    """A number that changes when an object is rewritten: its ETag (S3, GCS), else its mtime."""
    for key in ("ETag", "etag", "md5Hash", "generation"):
        if info.get(key):
            digest = hashlib.sha256(str(info[key]).encode()).digest()
            return int.from_bytes(digest[:7], "big") or 1
    mtime = info.get("mtime") or info.get("LastModified") or info.get("updated")
    if isinstance(mtime, datetime):
        return int(mtime.timestamp() * 1e9) or 1
    if isinstance(mtime, int | float):
        return int(mtime * 1e9) or 1
    return int(info.get("size") or 0) + 1
