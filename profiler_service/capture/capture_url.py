"""Captures the job's profiler writes to a URL (gs://...) when it shares no volume with us.

The profiler server writes each capture itself, through TensorFlow's filesystems. Without a
volume the job and the service both mount, the service names a URL instead, then fetches the
files into its local staging directory with fsspec and removes them there, so the rest of the
pipeline (analysis, publish, the bucket mirror) is the same for both ways.
"""

from __future__ import annotations

import logging
import posixpath
from pathlib import Path

import fsspec

from profiler_service.capture.capturer import CaptureFailed
from profiler_service.errors import SnapshotErrorCode

log = logging.getLogger(__name__)


class CaptureUrl:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def logdir(self, snapshot_id: str) -> str:
        """Where the job's profiler writes one snapshot's capture."""
        return f"{self.url}/{snapshot_id}"

    def fetch(self, snapshot_id: str, local_logdir: Path) -> None:
        """Copy `<url>/<id>/plugins/profile/<run>/*.xplane.pb` into the local logdir."""
        remote = self.logdir(snapshot_id)
        try:
            fs, root = fsspec.core.url_to_fs(remote)
            found = sorted(fs.glob(posixpath.join(root, "plugins/profile/*/*.xplane.pb")))
            for path in found:
                run, name = path.rsplit("/", 2)[-2:]
                local = local_logdir / "plugins" / "profile" / run / name
                local.parent.mkdir(parents=True, exist_ok=True)
                fs.get_file(path, str(local))
        except (OSError, ValueError, ImportError) as exc:
            raise CaptureFailed(
                SnapshotErrorCode.CAPTURE_FETCH_FAILED,
                f"the capture was written to {remote} but could not be read back: {exc}",
            ) from None
        if not found:
            raise CaptureFailed(
                SnapshotErrorCode.CAPTURE_FILE_MISSING,
                f"the profiler reported success but wrote no .xplane.pb under {remote}",
            )

    def remove(self, snapshot_id: str) -> None:
        """Best effort: a leftover costs storage, not correctness (a lifecycle rule sweeps it)."""
        remote = self.logdir(snapshot_id)
        try:
            fs, root = fsspec.core.url_to_fs(remote)
            if fs.exists(root):
                fs.rm(root, recursive=True)
        except Exception as exc:  # any backend error; never fails the snapshot
            log.warning("could not remove %s after fetching it: %s", remote, exc)
