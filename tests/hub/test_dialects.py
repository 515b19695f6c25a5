"""The fleet index's dialect seam (hub/index/dialects.py): each database answers through its
class; one the index has no class for is refused with a sentence, before anything is opened."""

from __future__ import annotations

import pytest

from profiler_service.hub.index.database import FleetDatabase
from profiler_service.hub.index.dialects import DIALECTS, SQLite, UnsupportedDatabase
from profiler_service.hub.index.schema import metadata


def test_an_unsupported_database_is_refused_with_the_ones_there_are():
    with pytest.raises(UnsupportedDatabase) as refused:
        FleetDatabase("mysql+pymysql://hub@db/fleet")
    assert str(refused.value) == "the fleet index runs on postgresql or sqlite, not 'mysql'"
    assert set(DIALECTS) == {"sqlite", "postgresql"}


def test_sqlite_answers_through_its_dialect(tmp_path):
    db = FleetDatabase(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    try:
        assert isinstance(db.dialect, SQLite) and not db.shared
        db.migrate()
        assert db.revision() is not None and db.size_bytes() > 0
        with db.lease("sync") as first, db.lease("sync") as second, db.lease("other") as third:
            assert (first, second, third) == (True, False, True)  # one holder per name
        with db.lease("sync") as again:
            assert again  # let go
        table = metadata.tables["snapshots"]
        upsert = db.insert(table).values(id="x").on_conflict_do_nothing()
        assert upsert.dialect_kwargs is not None  # SQLite's INSERT, which can upsert
    finally:
        db.close()
