"""The fleet index's database: SQLite on local disk (one replica, the default) or PostgreSQL
(`PROFILER_HUB_DATABASE_URL`, shared by every replica), each through its dialect (dialects.py).
Opening it migrates it to the newest schema (Alembic, migrations/: several replicas starting at
once migrate it once, under a lock), and `lease` lets one replica at a time sync the bucket
into it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, make_url

from profiler_service.hub.index.dialects import dialect_of

__all__ = ["FleetDatabase", "database_url"]

MIGRATIONS = Path(__file__).parent / "migrations"


def database_url(url: str | None, store: Path) -> str:
    """The URL to open: PostgreSQL's with the psycopg driver named, or SQLite's under the store."""
    if not url:
        return f"sqlite:///{store / 'fleet.sqlite'}"
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


class FleetDatabase:
    def __init__(self, url: str):
        self.url = url
        self.dialect = dialect_of(url)
        self.engine = self.dialect.engine()

    def __repr__(self) -> str:  # never the password
        return f"FleetDatabase({make_url(self.url).render_as_string(hide_password=True)!r})"

    @property
    def shared(self) -> bool:
        """Whether other replicas may use it too (PostgreSQL)."""
        return self.dialect.shared

    def insert(self, table: sa.Table) -> Any:
        """An upsertable INSERT in this database's dialect."""
        return self.dialect.insert(table)

    def migrate(self) -> None:
        """To the newest revision; replicas starting together take turns (the dialect's lock)."""
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as conn:
            self.dialect.lock_migrations(conn)
            config.attributes["connection"] = conn
            config.attributes["alters_by_copying"] = self.dialect.alters_by_copying
            command.upgrade(config, "head")

    def revision(self) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()

    def lease(self, name: str) -> AbstractContextManager[bool]:
        """Whether this replica holds `name` (never waits): PostgreSQL's advisory lock, held by a
        connection of its own, so a replica that dies mid-sync lets go with it; SQLite's, this
        process's."""
        return self.dialect.lease(self.engine, name)

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
            return self.dialect.size_bytes(conn)

    def close(self) -> None:
        self.engine.dispose()
