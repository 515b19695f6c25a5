"""Baselines: which snapshot a target (or a label such as a model name) is compared against.

Kept in `STORE/baselines.json` as `{"target:trainer": "<snapshot id>", "label:model=resnet": ...}`;
baseline snapshots are pinned, so retention never evicts them.

With a shared bucket, each sidecar also copies its baselines beside the snapshots
(`URL/baselines/<namespace>.<pod>.json`, by its mirror after each change), so the fleet hub
compares every job with the baseline its team chose, even one older than the page's window
(`FleetBaselines`, read at each sync: only the files that changed).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profiler_service.store.bucket_client import BucketClient

log = logging.getLogger(__name__)

BASELINES_PREFIX = "baselines"

_KEY = re.compile(r"^(target:[a-z0-9-]{1,40}|label:[A-Za-z0-9_.-]{1,64}=[^\s]{1,128})$")


def target_key(target: str) -> str:
    return f"target:{target}"


def label_key(label: str) -> str:
    """`model=resnet` -> `label:model=resnet`; raises ValueError for anything else."""
    key = f"label:{label}"
    if "=" not in label or not _KEY.match(key):
        raise ValueError(f"label {label!r} must look like name=value")
    return key


class BaselineRegistry:
    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def all(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str) and _KEY.match(k)}

    def get(self, key: str) -> str | None:
        return self.all().get(key)

    def set(self, key: str, snapshot_id: str) -> None:
        with self._lock:
            data = self.all()
            data[key] = snapshot_id
            self._write(data)

    def forget(self, snapshot_id: str) -> None:
        """Drop every key pointing at a snapshot that no longer exists."""
        with self._lock:
            data = self.all()
            kept = {k: v for k, v in data.items() if v != snapshot_id}
            if kept != data:
                self._write(kept)

    def _write(self, data: dict[str, str]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, self.path)


def fleet_baselines_path(sidecar: str) -> str:
    """Where a sidecar (manifest.sidecar_key) copies its baselines in the bucket."""
    return f"{BASELINES_PREFIX}/{sidecar}.json"


class FleetBaselines:
    """Every sidecar's target baselines, from the bucket: the snapshot ids (a snapshot names its
    own job: namespace, workload, target)."""

    def __init__(self, mirror: BucketClient):
        self.mirror = mirror
        self._files: dict[str, tuple[int, str | None, dict[str, str]]] = {}  # path -> what
        self.ids: frozenset[str] = frozenset()

    def refresh(self) -> None:
        """Read the files that changed; drop the ones gone (may raise what the bucket raises)."""
        listed = self.mirror.list_records(BASELINES_PREFIX)
        changed = [p for p, v in listed.items() if self._files.get(p, (None,))[0] != v]
        files = {p: f for p, f in self._files.items() if p in listed}
        for path, data in self.mirror.read_paths(changed).items():
            try:
                doc = json.loads(data)
                keys = {k: v for k, v in doc["baselines"].items() if isinstance(v, str)}
                files[path] = (listed[path], doc.get("namespace"), keys)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("skipping the baselines file %s: %s", path, exc)
        self._files = files
        self.ids = frozenset(
            snapshot_id
            for _, _, keys in files.values()
            for key, snapshot_id in keys.items()
            if key.startswith("target:")
        )
