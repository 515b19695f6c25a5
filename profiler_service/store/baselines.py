"""Baselines: which snapshot a target (or a label such as a model name) is compared against.

Kept in `STORE/baselines.json` as `{"target:trainer": "<snapshot id>", "label:model=resnet": ...}`;
baseline snapshots are pinned, so retention never evicts them.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

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
