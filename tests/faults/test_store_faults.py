"""The store's own filesystem fails: it fills up mid-capture, or it is mounted read-only.

Both use a real tmpfs mounted by the test (root only: CI runs as root; elsewhere the tests fail
and say so rather than skip). The job's profiler server writes the capture into that tmpfs itself.
"""

from __future__ import annotations

from fault_helpers import assert_nothing_half_written, fingerprint, remount, tmpfs


def test_store_filling_up_mid_capture_fails_that_snapshot_only(
    input_bound_job, service_factory, tmp_path
):
    # The input-bound job writes about 0.5 MB of XSpace per captured second (less on a loaded
    # machine): 10 s cannot fit in 1 MB.
    with tmpfs(tmp_path / "store", "1m") as store:
        service = service_factory(
            [input_bound_job.address], {"PROFILER_CAPTURE_ATTEMPTS": "1"}, store=store
        )
        try:
            with service.client() as client:
                earlier = client.post("/profile", params={"duration": "100ms", "wait": "true"})
                assert earlier.json()["status"] == "ready", earlier.json().get("error")
                before = fingerprint(client, store, earlier.json())

                answer = client.post("/profile", params={"duration": "10s", "wait": "true"})
                assert answer.status_code in (502, 503), answer.text  # the profiler's or ours
                body = answer.json()["snapshot"]
                assert body["status"] == "failed"
                assert body["error"]["code"] in {"store_not_writable", "capture_empty"}, body
                assert "No space left" in body["error"]["detail"], body["error"]
                assert body["files"] == []
                assert list((store / "failed" / body["id"]).rglob("*.xplane.pb")) == []
                assert list((store / ".staging").iterdir()) == []

                assert_nothing_half_written(client, store, [earlier.json()["id"]])
                assert fingerprint(client, store, earlier.json()) == before
                # The partial file was removed, so the space is back: the next capture works.
                again = client.post("/profile", params={"duration": "100ms", "wait": "true"})
                assert again.json()["status"] == "ready", again.json().get("error")
        finally:
            service.stop()


def test_read_only_store_serves_what_it_holds_and_refuses_captures(
    input_bound_job, service_factory, tmp_path
):
    with tmpfs(tmp_path / "store", "20m") as store:
        targets = [input_bound_job.address, "dead=grpc://127.0.0.1:9"]
        first = service_factory(targets, store=store)
        try:
            with first.client() as client:
                ready = client.post("/profile", params={"duration": "100ms", "wait": "true"})
                assert ready.json()["status"] == "ready", ready.json().get("error")
                failed = client.post(
                    "/profile", params={"duration": "100ms", "wait": "true", "target": "dead"}
                ).json()["snapshot"]
                assert failed["status"] == "failed"
                listing = client.get("/profiles").json()
                before = [fingerprint(client, store, s) for s in (ready.json(), failed)]
        finally:
            first.stop()

        remount(store, "ro")
        second = service_factory(targets, store=store)  # starts: a read-only store is served
        try:
            with second.client() as client:
                assert client.get("/profiles").json() == listing
                assert [fingerprint(client, store, s) for s in (ready.json(), failed)] == before
                sid = ready.json()["id"]
                assert client.get(f"/profiles/{sid}/report").status_code == 200
                name = ready.json()["files"][0]["name"]
                assert client.get(f"/profiles/{sid}/files/{name}").status_code == 200
                assert client.get("/metrics").status_code == 200

                unready = client.get("/readyz")
                assert unready.status_code == 503
                assert "Read-only file system" in unready.json()["checks"]["store"]
                refused = client.post("/profile", params={"duration": "100ms"})
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"] == "store_not_writable"
                for method, path in (
                    ("DELETE", f"/profiles/{sid}"),
                    ("PUT", f"/profiles/{sid}/pin"),
                ):
                    answer = client.request(method, path)
                    assert answer.status_code == 503, (method, answer.text)
                    assert answer.json()["error"] == "store_not_writable"
                assert client.get("/profiles").json() == listing

                remount(store, "rw")  # the volume comes back: captures work again
                assert client.get("/readyz").json()["checks"]["store"] == "ok"
                again = client.post("/profile", params={"duration": "100ms", "wait": "true"})
                assert again.json()["status"] == "ready", again.json().get("error")
        finally:
            second.stop()
