"""What the fleet index asks of its database that SQL alone does not say, one class per
database: how to open it, how to upsert, how one replica takes a lease, how migrations alter a
table, how big it is. database.py, writes.py and registry_table.py speak only through it, so a
third database is one class here (and its entry in `DIALECTS`).

- SQLite (one replica, the default): a file under the store; leases are this process's locks.
- PostgreSQL (`PROFILER_HUB_DATABASE_URL`, shared by every replica): advisory locks, held by a
  connection of their own, so a replica that dies lets go with it.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine, make_url

__all__ = ["DIALECTS", "Dialect", "PostgreSQL", "SQLite", "UnsupportedDatabase", "dialect_of"]


class UnsupportedDatabase(ValueError):
    """A database URL for which the index has no dialect."""


class Dialect:
    """One database's answers; `url` is the index's own."""

    name: ClassVar[str]
    shared: ClassVar[bool]  # other replicas may use the same database
    alters_by_copying: ClassVar[bool] = False  # migrations rebuild a table to alter it

    def __init__(self, url: str):
        self.url = url

    def engine(self) -> Engine:
        raise NotImplementedError

    def insert(self, table: sa.Table) -> Any:
        """An INSERT that can `on_conflict_do_update` (the upserts of writes.py)."""
        raise NotImplementedError

    def lock_migrations(self, conn: Connection) -> None:
        """Within `conn`'s transaction, make replicas starting together migrate in turn."""

    def lease(self, engine: Engine, name: str) -> AbstractContextManager[bool]:
        """Whether this replica holds `name` now (never waits)."""
        raise NotImplementedError

    def size_bytes(self, conn: Connection) -> int | None:
        raise NotImplementedError


class SQLite(Dialect):
    name = "sqlite"
    shared = False
    alters_by_copying = True

    def __init__(self, url: str):
        super().__init__(url)
        self._leases: dict[str, threading.Lock] = {}
        self._leases_lock = threading.Lock()

    def engine(self) -> Engine:
        path = make_url(self.url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        connect = {"check_same_thread": False, "timeout": 30}
        engine = sa.create_engine(self.url, connect_args=connect)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine

    def insert(self, table: sa.Table) -> Any:
        return sqlite.insert(table)

    @contextmanager
    def lease(self, engine: Engine, name: str) -> Iterator[bool]:
        with self._leases_lock:
            lock = self._leases.setdefault(name, threading.Lock())
        held = lock.acquire(blocking=False)
        try:
            yield held
        finally:
            if held:
                lock.release()

    def size_bytes(self, conn: Connection) -> int | None:
        path = make_url(self.url).database
        return Path(path).stat().st_size if path and Path(path).exists() else None


class PostgreSQL(Dialect):
    name = "postgresql"
    shared = True

    def engine(self) -> Engine:
        return sa.create_engine(self.url, pool_size=8, max_overflow=8, pool_pre_ping=True)

    def insert(self, table: sa.Table) -> Any:
        return postgresql.insert(table)

    def lock_migrations(self, conn: Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_key("migrate"))))

    @contextmanager
    def lease(self, engine: Engine, name: str) -> Iterator[bool]:
        with engine.connect() as conn:
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

    def size_bytes(self, conn: Connection) -> int | None:
        size = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar()
        return int(size or 0)


DIALECTS: dict[str, type[Dialect]] = {d.name: d for d in (SQLite, PostgreSQL)}


def dialect_of(url: str) -> Dialect:
    """The dialect for `url` (its backend: `sqlite`, `postgresql`)."""
    backend = make_url(url).get_backend_name()
    try:
        return DIALECTS[backend](url)
    except KeyError:
        raise UnsupportedDatabase(
            f"the fleet index runs on {' or '.join(sorted(DIALECTS))}, not {backend!r}"
        ) from None


def _lock_key(name: str) -> int:
    """A stable 63-bit key for PostgreSQL's advisory locks."""
    return zlib.crc32(f"profiler-service:{name}".encode()) + (1 << 40)


def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()
