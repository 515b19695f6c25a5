"""The fleet index's database: SQLite on local disk (one replica, the default) or PostgreSQL
(`PROFILER_HUB_DATABASE_URL`, shared by every replica). Opening it migrates it to the newest
schema (Alembic, migrations/: several replicas starting at once migrate it once, under a lock),
and `lease` lets one replica at a time sync the bucket into it.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine, make_url

__all__ = ["FleetDatabase", "database_url", "utc"]

MIGRATIONS = Path(__file__).parent / "migrations"


def database_url(url: str | None, store: Path) -> str:
    """The URL to open: PostgreSQL's with the psycopg driver named, or SQLite's under the store."""
    if not url:
        return f"sqlite:///{store / 'fleet.sqlite'}"
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def utc(value: datetime) -> datetime:
    """Aware, in UTC: SQLite hands datetimes back naive, PostgreSQL in the session's zone."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _lock_key(name: str) -> int:
    """A stable 63-bit key for PostgreSQL's advisory locks."""
    return zlib.crc32(f"profiler-service:{name}".encode()) + (1 << 40)


class FleetDatabase:
    def __init__(self, url: str):
        self.url = url
        self.dialect = make_url(url).get_backend_name()
        self.engine = self._engine()
        self._local_leases: dict[str, threading.Lock] = {}
        self._leases_lock = threading.Lock()

    def __repr__(self) -> str:  # never the password
        return f"FleetDatabase({make_url(self.url).render_as_string(hide_password=True)!r})"

    @property
    def shared(self) -> bool:
        """Whether other replicas may use it too (PostgreSQL)."""
        return self.dialect != "sqlite"

    def _engine(self) -> Engine:
        if not self.shared:
            path = make_url(self.url).database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(
                self.url, connect_args={"check_same_thread": False, "timeout": 30}
            )
            sa.event.listen(engine, "connect", _sqlite_pragmas)
            return engine
        return sa.create_engine(self.url, pool_size=8, max_overflow=8, pool_pre_ping=True)

    def migrate(self) -> None:
        """To the newest revision; replicas starting together take turns (PostgreSQL lock)."""
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as conn:
            if self.shared:
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_key("migrate"))))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    def revision(self) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()

    @contextmanager
    def lease(self, name: str) -> Iterator[bool]:
        """Whether this replica holds `name` (never waits): a PostgreSQL advisory lock, held
        by a connection of its own, so a replica that dies mid-sync lets go with it."""
        if not self.shared:
            with self._leases_lock:
                lock = self._local_leases.setdefault(name, threading.Lock())
            held = lock.acquire(blocking=False)
            try:
                yield held
            finally:
                if held:
                    lock.release()
            return
        with self.engine.connect() as conn:
            key = _lock_key(name)
            held = bool(conn.execute(sa.select(sa.func.pg_try_advisory_lock(key))).scalar())
            conn.commit()
            try:
                yield held
            finally:
                if held:  # a connection cut mid-way took its lock with it: nothing to undo
                    with contextlib.suppress(sa.exc.SQLAlchemyError):
                        conn.execute(sa.select(sa.func.pg_advisory_unlock(key)))
                        conn.commit()

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    def ping(self) -> None:
        """Raises when the database does not answer (the hub's health check)."""
        with self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def size_bytes(self) -> int | None:
        """The database's size on disk (PostgreSQL's own figure; SQLite's file)."""
        with self.engine.connect() as conn:
            if self.shared:
                return int(conn.execute(sa.text("SELECT pg_database_size(current_database())"))
                           .scalar() or 0)  # fmt: skip
            path = make_url(self.url).database
            return Path(path).stat().st_size if path and Path(path).exists() else None

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()
