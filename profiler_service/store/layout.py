"""The store's files: names, locations, and the few operations on them every part shares.

A snapshot's `snapshot.json` is written whole (a temporary name, fsync, rename); its capture files
are the `*.xplane.pb` beside it and the job's Python stacks where the agent sampled them (XProf's
cache files there are not the snapshot's).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from profiler_service.models import Snapshot, SnapshotFile
from profiler_service.probes.python_stacks import SAMPLES_FILE, STACKS_FILE

__all__ = ["FAILED", "READY", "SNAPSHOT_FILE", "STAGING", "dir_size", "list_files", "write_json"]

SNAPSHOT_FILE = "snapshot.json"
READY, FAILED, STAGING = "ready", "failed", "staging"  # index locations with a local directory
SIDE_FILES = (STACKS_FILE, SAMPLES_FILE)  # stored beside the trace when the capture wrote them


def write_json(path: Path, snapshot: Snapshot) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(snapshot.model_dump_json(indent=2))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def list_files(directory: Path) -> list[SnapshotFile]:
    """The capture files; XProf's own cache files beside them are not part of the snapshot."""
    if not directory.is_dir():
        return []
    paths = [*sorted(directory.glob("*.xplane.pb")), *(directory / n for n in SIDE_FILES)]
    return [SnapshotFile(name=p.name, size_bytes=p.stat().st_size) for p in paths if p.is_file()]


def dir_size(directory: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for dirpath, _, filenames in os.walk(directory):
            for name in filenames:
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(dirpath, name)).st_size
    return total
