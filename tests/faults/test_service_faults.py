"""The service itself fails: SIGKILL while analysing, its index lost or corrupt while stopped,
and a corrupt capture through the HTTP API.

(SIGKILL mid-capture, an unreachable target and a black-hole target are in tests/e2e/.)
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from fakes import WritesBytes
from fastapi.testclient import TestClient
from fault_helpers import assert_nothing_half_written, fingerprint
from helpers import no_process_mentions, wait_for_status

from profiler_service.api.app import create_app


def test_kill_9_during_analysis_leaves_an_interrupted_snapshot_after_restart(
    compute_bound_job, service_factory, tmp_path
):
    store = tmp_path / "store"
    service = service_factory([compute_bound_job.address], store=store)
    with service.client() as client:
        earlier = client.post("/profile", params={"duration": "200ms", "wait": "true"}).json()
        assert earlier["status"] == "ready", earlier.get("error")
        before = fingerprint(client, store, earlier)
        # Several seconds of a compute-bound job: tens of MB that XProf takes seconds to analyse.
        victim = client.post("/profile", params={"duration": "4s"}).json()
        wait_for_status(client, victim["id"], {"analyzing"}, timeout_s=120)
    os.kill(service.proc.pid, signal.SIGKILL)
    service.proc.wait()
    # The analysis worker died with the service (PR_SET_PDEATHSIG): nothing writes on.
    assert no_process_mentions(victim["id"])

    restarted = service_factory([compute_bound_job.address], store=store)
    with restarted.client() as client:
        body = client.get(f"/profiles/{victim['id']}").json()
        assert body["status"] == "interrupted"
        assert body["error"]["code"] == "interrupted"
        assert "analyzing" in body["error"]["detail"]
        assert body["files"] == []
        assert_nothing_half_written(client, store, [earlier["id"]])
        assert fingerprint(client, store, earlier) == before
    assert list((store / ".staging").iterdir()) == []
    assert list((store / "failed" / victim["id"]).rglob("*.xplane.pb")) == []


def test_index_deleted_or_corrupt_while_stopped_is_rebuilt_with_the_same_listing(
    input_bound_job, service_factory, tmp_path
):
    store = tmp_path / "store"
    targets = [input_bound_job.address, "dead=grpc://127.0.0.1:9"]
    service = service_factory(targets, store=store)
    with service.client() as client:
        for params in ({}, {"target": "dead"}, {}):
            client.post("/profile", params={"duration": "100ms", "wait": "true", **params})
        pinned = client.get("/profiles", params={"status": "ready"}).json()["data"][0]["id"]
        assert client.put(f"/profiles/{pinned}/pin").status_code == 200
        listing = client.get("/profiles").json()
        assert listing["count"] == 3
        whole = {s["id"]: client.get(f"/profiles/{s['id']}").json() for s in listing["data"]}
    service.stop()

    index = store / "index.sqlite"
    for damage in ("deleted", "corrupt"):
        if damage == "deleted":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{index}{suffix}").unlink(missing_ok=True)
        else:
            index.write_bytes(b"this is not an SQLite database" * 100)
        restarted = service_factory(targets, store=store)
        with restarted.client() as client:
            assert client.get("/profiles").json() == listing, damage
            for snapshot_id, snapshot in whole.items():
                assert client.get(f"/profiles/{snapshot_id}").json() == snapshot
            ready = [s["id"] for s in listing["data"] if s["status"] == "ready"]
            assert_nothing_half_written(client, store, ready)
        restarted.stop()


def test_corrupt_capture_through_the_api_is_a_failed_snapshot_with_its_file(make_service):
    service = make_service(WritesBytes(b"\x0a\xff\xff\x7f" + os.urandom(4000)))
    with TestClient(create_app(service)) as client:
        answer = client.post("/profile", params={"duration": "100ms", "wait": "true"})
        assert answer.status_code == 500  # the analysis failed: the service's, not the job's
        assert answer.json()["error"] == "analysis_failed" and "XProf" in answer.json()["detail"]
        body = answer.json()["snapshot"]
        assert body["status"] == "failed"
        assert body["error"]["code"] == "analysis_failed" and "XProf" in body["error"]["detail"]
        assert client.get("/profiles", params={"status": "ready"}).json()["count"] == 0
        kept = client.get(f"/profiles/{body['id']}/files/worker-0.xplane.pb")
        assert kept.status_code == 200 and kept.content.startswith(b"\x0a\xff\xff\x7f")
        assert client.get(f"/profiles/{body['id']}/report").status_code == 200
        assert client.get("/healthz").status_code == 200
        # Nothing is left in flight: the next capture is accepted (and fails the same way).
        again = client.post("/profile", params={"duration": "100ms", "wait": "true"})
        assert again.status_code == 500 and again.json()["snapshot"]["status"] == "failed"
