"""Alembic's environment for the fleet index: run from `database.migrate()` with an open
connection (`config.attributes["connection"]`); no alembic.ini, no URL of its own."""

from __future__ import annotations

from alembic import context

from profiler_service.hub.index.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    # SQLite alters a table by copying it (dialects.py)
    render_as_batch=context.config.attributes.get("alters_by_copying", False),
)
with context.begin_transaction():
    context.run_migrations()
