"""A real PostgreSQL server for the hub's shared index: Debian's `postgresql` package, `initdb`
into a temporary folder, `postgres` on a free loopback port (no socket file, no service).

PostgreSQL refuses to run as root, and CI runs as root: then the cluster belongs to the
package's `postgres` user and both programs run as it. Trust authentication on
loopback only; one database per test (`database()`), dropped by the next start's cleanup.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from helpers import free_port, stop_process, wait_until

BIN = Path("/usr/lib/postgresql/15/bin")


def _owner() -> dict:
    """Popen's arguments that run a program as the cluster's owner (root: `postgres`)."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


@dataclass
class PostgresServer:
    port: int = field(default_factory=free_port)
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="profiler-pg-")))
    proc: subprocess.Popen | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        """Initialise the data directory (once) and start the server on it."""
        data = self.folder / "data"
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        if not data.exists():
            subprocess.run(
                [str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                 "--no-sync", "-E", "UTF8"],
                check=True, capture_output=True, **_owner(),
            )  # fmt: skip
        log = (self.folder / "postgres.log").open("a")
        self.proc = subprocess.Popen(
            [str(BIN / "postgres"), "-D", str(data), "-p", str(self.port), "-h", "127.0.0.1",
             "-k", "", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off"],
            stdout=log, stderr=subprocess.STDOUT, **_owner(),
        )  # fmt: skip
        wait_until(self._answers, 60, "PostgreSQL to accept connections")
        return self

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            log = (self.folder / "postgres.log").read_text()[-2000:]
            raise RuntimeError(f"postgres exited {self.proc.returncode}: {log}")
        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def database(self) -> str:
        """A new empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def halt(self) -> None:
        """A fast shutdown (SIGINT: open sessions are ended, not waited for), data kept:
        `start()` brings it back, as after an outage."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                stop_process(self.proc)

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.folder, ignore_errors=True)
