"""One capture at a time per target, and a crash mid-capture leaves nothing half-made."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

import httpx
from helpers import no_process_mentions, wait_for_status


def test_fifty_concurrent_posts_start_exactly_one_capture(input_bound_job, service_factory):
    service = service_factory([input_bound_job.address])

    def post(_: int) -> httpx.Response:
        return httpx.post(f"{service.url}/profile", params={"duration": "10s"}, timeout=60)

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(post, range(50)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [202] + [409] * 49
    accepted = next(r.json() for r in responses if r.status_code == 202)
    for r in responses:
        if r.status_code == 409:
            assert r.json()["error"] == "capture_in_progress"
            assert r.json()["snapshot_id"] == accepted["id"]
            assert int(r.headers["Retry-After"]) >= 1
    with service.client() as client:
        assert wait_for_status(client, accepted["id"], {"ready", "failed"})["status"] == "ready"
        # Once it is done, the target takes a new capture.
        assert client.post("/profile", params={"duration": "500ms"}).status_code == 202


def test_kill_9_mid_capture_leaves_an_interrupted_snapshot_after_restart(
    input_bound_job, service_factory, tmp_path
):
    store = tmp_path / "store"
    service = service_factory([input_bound_job.address], store=store)
    with service.client() as client:
        earlier = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
        assert earlier["status"] == "ready"
        victim = client.post("/profile", params={"duration": "10s"}).json()
        wait_for_status(client, victim["id"], {"capturing"})
        input_bound_job.wait_for_a_client()  # the capture client is tracing the job
    os.kill(service.proc.pid, signal.SIGKILL)
    service.proc.wait()

    # The capture client died with the service: no orphan keeps tracing into the store.
    assert no_process_mentions(victim["id"])

    restarted = service_factory([input_bound_job.address], store=store)
    with restarted.client() as client:
        body = client.get(f"/profiles/{victim['id']}").json()
        assert body["status"] == "interrupted"
        assert body["error"]["code"] == "interrupted"
        ready_ids = [
            s["id"] for s in client.get("/profiles", params={"status": "ready"}).json()["data"]
        ]
        assert ready_ids == [earlier["id"]]
        assert client.get(f"/profiles/{earlier['id']}").json()["status"] == "ready"
    assert not (store / "plugins" / "profile" / victim["id"]).exists()
    assert list((store / ".staging").iterdir()) == []
    assert list((store / "failed" / victim["id"]).rglob("*.xplane.pb")) == []


def test_a_second_capture_of_a_job_already_being_profiled_says_so(
    input_bound_job, service_factory, tmp_path
):
    """Two services on one job: the job's profiler allows one session; the second is told why."""
    first = service_factory([input_bound_job.address], store=tmp_path / "a")
    second = service_factory([input_bound_job.address], store=tmp_path / "b")
    with first.client() as a, second.client() as b:
        long = a.post("/profile", params={"duration": "8s"}).json()
        wait_for_status(a, long["id"], {"capturing"})
        input_bound_job.wait_for_a_client()  # the first capture's: the job's profiler is busy
        answer = b.post("/profile", params={"duration": "1s", "wait": "true"})
        assert answer.status_code == 409 and answer.json()["error"] == "profiler_busy", answer.text
        clash = answer.json()["snapshot"]
        assert clash["status"] == "failed"
        assert clash["error"]["code"] == "profiler_busy", clash["error"]
        assert wait_for_status(a, long["id"], {"ready", "failed"})["status"] == "ready"


def test_a_target_that_never_answers_is_stopped_at_duration_plus_grace(service_factory):
    """A listener that accepts connections and says nothing: the capture must not hang."""
    import socket

    with socket.socket() as black_hole:
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen(16)
        port = black_hole.getsockname()[1]
        service = service_factory([f"grpc://127.0.0.1:{port}"], {"PROFILER_CAPTURE_GRACE_S": "2"})
        with service.client() as client:
            answer = client.post("/profile", params={"duration": "1s", "wait": "true"})
            assert answer.status_code == 504, answer.text  # the job's profiler never answered
            body = answer.json()["snapshot"]
            assert body["status"] == "failed"
            assert body["error"]["code"] in {"capture_timeout", "target_timeout"}, body["error"]
            assert client.get("/healthz").status_code == 200
            assert client.post("/profile", params={"duration": "1s"}).status_code == 202


def test_an_unwritable_store_is_refused_clearly_and_the_service_recovers(
    input_bound_job, service_factory
):
    service = service_factory([input_bound_job.address])
    staging = service.store / ".staging"
    staging.rmdir()
    staging.write_text("not a directory")  # as root, permissions would not stop a write
    try:
        with service.client() as client:
            refused = client.post("/profile", params={"duration": "500ms"})
            assert refused.status_code == 503
            assert refused.json()["error"] == "store_not_writable"
            assert str(service.store) in refused.json()["detail"]
            assert client.get("/readyz").status_code == 503
            assert client.get("/profiles").json()["count"] == 0
    finally:
        staging.unlink()
        staging.mkdir()
    with service.client() as client:
        assert client.get("/readyz").status_code == 200
        body = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
        assert body["status"] == "ready", body.get("error")


def test_an_analysis_past_its_memory_limit_stops_cleanly_and_keeps_the_capture(
    compute_bound_job, service_factory
):
    """XProf's worker is stopped at PROFILER_ANALYSIS_MAX_MEMORY_BYTES (here below what it
    needs just to start), before the kernel's OOM killer could take the service instead."""
    limit = 40 * 2**20
    service = service_factory(
        [compute_bound_job.address], {"PROFILER_ANALYSIS_MAX_MEMORY_BYTES": str(limit)}
    )
    with service.client() as client:
        answer = client.post("/profile", params={"duration": "1s", "wait": "true"})
        assert answer.status_code == 500 and answer.json()["error"] == "analysis_too_large"
        body = answer.json()["snapshot"]
        assert body["status"] == "failed"
        assert body["error"]["code"] == "analysis_too_large", body["error"]
        assert "40 MB" in body["error"]["detail"] and "capture is kept" in body["error"]["detail"]
        [kept] = body["files"]
        raw = client.get(body["links"]["files"][kept["name"]])
        assert raw.status_code == 200 and len(raw.content) == kept["size_bytes"] > 0
        assert client.get("/healthz").status_code == 200
