"""A store written by the release before this one opens in this one with nothing lost: every
snapshot, finding, pin and baseline, through the API (tests/fixtures/releases/: a store the
0.1.0 release's own code wrote, with make_store.py there)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from profiler_service.api.app import create_app

RELEASES = Path(__file__).resolve().parents[1] / "fixtures" / "releases"


@pytest.mark.parametrize("release", ["0.1.0"])
def test_a_store_an_older_release_wrote_opens_with_nothing_lost(release, make_service, tmp_path):
    written = RELEASES / release / "store"
    store = tmp_path / "store"
    shutil.copytree(written, store)
    docs = {
        p.parent.name: json.loads(p.read_text())
        for p in sorted(written.glob("*/**/snapshot.json"))
    }
    assert len(docs) == 4
    service = make_service(store=store)
    with TestClient(create_app(service)) as client:
        listed = client.get("/profiles", params={"limit": 50}).json()
        assert {s["id"] for s in listed["data"]} == set(docs)
        for snapshot_id, doc in docs.items():
            body = client.get(f"/profiles/{snapshot_id}").json()
            assert body["status"] == doc["status"]
            assert [f["rule"] for f in body["findings"]] == [f["rule"] for f in doc["findings"]]
            assert [f["impact"]["saving_share"] for f in body["findings"]] == [
                f["impact"]["saving_share"] for f in doc["findings"]
            ]  # what it predicted then, unchanged
            assert body["pinned"] == doc["pinned"]
            assert body["service_version"] is None  # written before versions were recorded
            if doc["status"] == "ready":
                assert client.get(f"/profiles/{snapshot_id}/report").status_code == 200
                name = doc["files"][0]["name"]
                file = client.get(f"/profiles/{snapshot_id}/files/{name}")
                kept = written / "plugins" / "profile" / snapshot_id / name
                assert file.content == kept.read_bytes()
        pinned = [i for i, d in docs.items() if d["pinned"]]
        assert pinned and all(client.get(f"/profiles/{i}").json()["pinned"] for i in pinned)
        baselines = client.get("/baselines").json()
        assert baselines == json.loads((written / "baselines.json").read_text()) != {}
        failed = next(d for d in docs.values() if d["status"] == "failed")
        assert client.get(f"/profiles/{failed['id']}").json()["error"] == failed["error"]
