"""A real S3 API on loopback for the shared-bucket tests: moto's standalone server, one process.

A plain module (like helpers.py): the store and e2e tests both start it. Its state lives in the
process's memory, so a stopped server comes back empty (the bucket-down tests rely on that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import s3fs
from helpers import stop_process, wait_for_http
from helpers import wait_until as wait_until  # the bucket tests import it from here

KEY = SECRET = "testing"  # moto accepts any credentials


@dataclass
class S3Server:
    port: int
    proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def options(self) -> dict:
        """fsspec storage options for this server (what PROFILER_STORE_OPTIONS holds)."""
        return {"endpoint_url": self.endpoint, "key": KEY, "secret": SECRET}

    @property
    def fast_fail_options(self) -> dict:
        """The same, giving up on a dead endpoint after one quick try (the bucket-down tests)."""
        config = {"connect_timeout": 1, "read_timeout": 10, "retries": {"max_attempts": 1}}
        return {**self.options, "config_kwargs": config}

    @property
    def options_json(self) -> str:
        return json.dumps(self.options)

    def fs(self) -> s3fs.S3FileSystem:
        return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, **self.options)

    def start(self, log: Path) -> S3Server:
        """`python -m moto.server` on 127.0.0.1:port; returns once it answers."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log.open("a"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        wait_for_http(
            self.proc, f"{self.endpoint}/moto-api/", log, "moto server", answered=lambda r: True
        )
        return self

    def stop(self) -> None:
        """Stop the process this object started, by its pid."""
        if self.proc is not None:
            stop_process(self.proc, timeout_s=10)
        self.proc = None

    def create_bucket(self, name: str) -> None:
        self.fs().mkdir(name)
