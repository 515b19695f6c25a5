"""What every fault test checks afterwards, and a real tmpfs the tests can fill or make read-only.

A plain module (not a conftest), like tests/helpers.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fingerprint(client: httpx.Client, store: Path, snapshot: dict) -> dict:
    """What must not change about an earlier snapshot: its JSON and its files' bytes."""
    body = client.get(f"/profiles/{snapshot['id']}").json()
    base = store / "plugins" / "profile" / snapshot["id"]
    if body["status"] != "ready":
        base = store / "failed" / snapshot["id"] / "run"
    return {"body": body, "files": {f["name"]: sha256(base / f["name"]) for f in body["files"]}}


def assert_nothing_half_written(client: httpx.Client, store: Path, ready_ids: list[str]) -> None:
    """The service answers; exactly `ready_ids` are listed as ready, each whole; no leftovers."""
    assert client.get("/healthz").status_code == 200
    listed = client.get("/profiles", params={"status": "ready", "limit": 500}).json()["data"]
    assert sorted(s["id"] for s in listed) == sorted(ready_ids)
    runs = sorted(p.name for p in (store / "plugins" / "profile").iterdir())
    assert runs == sorted(ready_ids), "a run XProf would list is not a ready snapshot"
    for snapshot in listed:
        assert snapshot["files"], snapshot["id"]
        for f in snapshot["files"]:
            path = store / "plugins" / "profile" / snapshot["id"] / f["name"]
            assert path.stat().st_size == f["size_bytes"] > 0
    failed = client.get("/profiles", params={"status": "failed", "limit": 500}).json()["data"]
    for snapshot in failed:
        assert snapshot["error"]["code"] and snapshot["error"]["detail"]
        assert not (store / "plugins" / "profile" / snapshot["id"]).exists()


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.fail(
            f"{what} needs root (it mounts a tmpfs); CI runs the suite as root: run it as root "
            "(scripts/test in the CI image) rather than skipping it"
        )


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real, small tmpfs at `path`, always unmounted afterwards (lazily if still busy)."""
    require_root("this fault test")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)
