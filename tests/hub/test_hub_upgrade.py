"""A fleet's bucket and the hub's index written by the release before this one open in this one
with nothing lost: every snapshot, finding, pin and baseline, through the hub's API, on SQLite
and on PostgreSQL (tests/fixtures/releases/: what the 0.1.0 release's own code wrote, with
make_hub.py there: its sidecar's mirror wrote the bucket, its hub synced it once into each
index)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory
from helpers import start_hub, stop_process, wait_until
from postgres_server import BIN

from profiler_service.hub.index.database import MIGRATIONS, database_url
from profiler_service.store.bucket_client import BucketClient

RELEASES = Path(__file__).resolve().parents[1] / "fixtures" / "releases"


def restore_index(kind: str, written: Path, hub_store: Path, request) -> str | None:
    """The release's index where this hub opens it: SQLite under its store (the default), or a
    new database of a real PostgreSQL restored from the release's dump; its URL (None: SQLite)."""
    if kind == "sqlite":
        hub_store.mkdir()
        shutil.copyfile(written / "hub-index.sqlite", hub_store / "fleet.sqlite")
        return None
    url = request.getfixturevalue("postgres").database()
    restored = subprocess.run(
        [str(BIN / "psql"), "-q", "-X", "-v", "ON_ERROR_STOP=1", "-d", url,
         "-f", str(written / "hub-index.sql")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    return url


def state(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT key, value FROM sync_state")).all())


def synced_since(engine: sa.Engine, before: str) -> str | None:
    """The time of the last sync, once it is not `before`."""
    last = state(engine)["last_sync_at"]
    return last if last != before else None


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("release", ["0.1.0"])
def test_a_bucket_and_an_index_an_older_release_wrote_open_with_nothing_lost(
    release, kind, tmp_path, request
):
    written = RELEASES / release
    bucket = tmp_path / "bucket"
    shutil.copytree(written / "bucket", bucket)
    docs = {
        p.parent.name: json.loads(p.read_text())
        for p in sorted((written / "bucket").glob("*/**/snapshot.json"))
    }
    assert len(docs) == 4
    hub_store = tmp_path / "hub"
    url = restore_index(kind, written, hub_store, request)
    engine = sa.create_engine(database_url(url, hub_store))
    try:
        with engine.connect() as conn:
            versions = dict(conn.execute(sa.text("SELECT id, version FROM snapshots")).all())
        assert set(versions) == set(docs)
        # A file:// bucket's versions are its snapshot.json files' mtimes, which git does not
        # keep: set back, the bucket is as the release left it beside its index.
        for path in bucket.glob("*/**/snapshot.json"):
            os.utime(path, ns=(versions[path.parent.name],) * 2)
        listed = BucketClient(f"file://{bucket}").list_snapshots()
        assert {i: e.version for i, e in listed.items()} == versions
        synced_at = state(engine)["last_sync_at"]

        env = {
            "PROFILER_STORE_URL": f"file://{bucket}",
            "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
            "PROFILER_HUB_FULL_SYNC_INTERVAL_S": "0.5",  # each sync lists the whole bucket
            **({"PROFILER_HUB_DATABASE_URL": url} if url else {}),
        }
        hub = start_hub(hub_store, env)
        try:
            # Two syncs of this release's over the release's index (the first one's baselines
            # are read once it is done).
            first = wait_until(lambda: synced_since(engine, synced_at), 30, "the hub's sync")
            wait_until(lambda: synced_since(engine, first), 30, "the hub's next sync")
            check_hub(hub.url, docs, bucket)
            with engine.connect() as conn:
                revision = conn.execute(sa.text("SELECT version_num FROM alembic_version"))
                assert revision.scalar() == head_revision()  # migrated to this release's
                # 0002 gave each finding row its snapshot's namespace, the release's rows too
                unfilled = conn.execute(sa.text(
                    "SELECT count(*) FROM findings f JOIN snapshots s ON s.id = f.snapshot_id "
                    "WHERE s.namespace IS NOT NULL "
                    "AND (f.namespace IS NULL OR f.namespace <> s.namespace)"
                ))  # fmt: skip
                assert unfilled.scalar() == 0
            baselines = {
                snapshot_id
                for p in (written / "bucket" / "baselines").glob("*.json")
                for key, snapshot_id in json.loads(p.read_text())["baselines"].items()
                if key.startswith("target:")
            }
            # The hub serves no baselines of its own (no `/baselines`): its sync keeps the ids
            # the sidecars' files name in the index, for the fleet view, and they are pinned.
            assert baselines and all(docs[i]["pinned"] for i in baselines)
            assert set(json.loads(state(engine)["baselines"])) == baselines
        finally:
            stop_process(hub.proc)
    finally:
        engine.dispose()


def check_hub(hub_url: str, docs: dict[str, dict], bucket: Path) -> None:
    with httpx.Client(base_url=hub_url, timeout=30) as client:
        listed = client.get("/profiles", params={"limit": 50}).json()
        assert {s["id"] for s in listed["data"]} == set(docs)
        for namespace, rule in {(d["namespace"], f["rule"]) for d in docs.values()
                                 for f in d["findings"]}:  # fmt: skip
            both = client.get("/profiles", params={"namespace": namespace, "rule": rule}).json()
            wanted = {i for i, d in docs.items() if d["namespace"] == namespace
                      and rule in {f["rule"] for f in d["findings"]}}  # fmt: skip
            assert {s["id"] for s in both["data"]} == wanted and both["count"] == len(wanted)
        for item in listed["data"]:  # the index's rows, as the release wrote them
            doc = docs[item["id"]]
            assert (item["status"], item["pinned"]) == (doc["status"], doc["pinned"])
            assert [f["rule"] for f in item["findings"]] == [f["rule"] for f in doc["findings"]]
        for snapshot_id, doc in docs.items():
            body = client.get(f"/profiles/{snapshot_id}").json()
            assert body["status"] == doc["status"]
            assert [f["rule"] for f in body["findings"]] == [f["rule"] for f in doc["findings"]]
            assert [f["impact"]["saving_share"] for f in body["findings"]] == [
                f["impact"]["saving_share"] for f in doc["findings"]
            ]  # what it predicted then, unchanged
            assert body["pinned"] == doc["pinned"]
            assert body["service_version"] is None  # written before versions were recorded
            assert body["error"] == doc["error"]
            if doc["status"] == "ready":
                assert client.get(f"/profiles/{snapshot_id}/report").status_code == 200
                name = doc["files"][0]["name"]
                file = client.get(f"/profiles/{snapshot_id}/files/{name}")
                kept = bucket / "plugins" / "profile" / snapshot_id / name
                assert file.status_code == 200 and file.content == kept.read_bytes()
        pinned = {i for i, d in docs.items() if d["pinned"]}
        assert pinned and pinned < set(docs)
        # The index's filters over the release's rows: as a plain filter of its documents.
        rules = {f["rule"] for d in docs.values() for f in d["findings"]}
        assert rules
        for params, keep in [
            ({"status": "failed"}, lambda d: d["status"] == "failed"),
            ({"status": "ready"}, lambda d: d["status"] == "ready"),
            ({"namespace": "ml", "target": "trainer"}, lambda d: d["namespace"] == "ml"),
            *(({"rule": r}, lambda d, r=r: r in {f["rule"] for f in d["findings"]})
              for r in sorted(rules)),
        ]:  # fmt: skip
            found = client.get("/profiles", params={"limit": 50, **params}).json()
            assert {s["id"] for s in found["data"]} == {i for i, d in docs.items() if keep(d)}


def head_revision() -> str:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config).get_current_head()
