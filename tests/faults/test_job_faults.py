"""The job being profiled misbehaves mid-capture: it dies, or it stops answering (SIGSTOP).

Each test starts a job of its own (the shared ones must not be killed or frozen).
"""

from __future__ import annotations

import os
import signal

import pytest
from fault_helpers import assert_nothing_half_written, fingerprint
from helpers import free_port, start_job, wait_for_status


@pytest.fixture
def own_job(tmp_path):
    job = start_job(
        "--workload", "input-bound", "--profiler-port", str(free_port()), clock=tmp_path / "clock"
    )
    yield job
    if job.proc.poll() is None:
        os.kill(job.proc.pid, signal.SIGCONT)
    job.stop()


def test_job_killed_mid_capture_fails_the_snapshot_with_the_reason(own_job, service_factory):
    service = service_factory([own_job.address])
    with service.client() as client:
        earlier = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
        assert earlier["status"] == "ready", earlier.get("error")
        before = fingerprint(client, service.store, earlier)

        victim = client.post("/profile", params={"duration": "10s"}).json()
        wait_for_status(client, victim["id"], {"capturing"})
        own_job.wait_for_a_client()  # the job's profiler is tracing
        own_job.proc.kill()
        own_job.proc.wait()

        body = wait_for_status(client, victim["id"], {"ready", "failed"}, timeout_s=60)
        assert body["status"] == "failed"
        assert body["error"]["code"] == "target_lost", body["error"]
        assert own_job.address.removeprefix("grpc://") in body["error"]["detail"]
        assert body["files"] == []
        assert_nothing_half_written(client, service.store, [earlier["id"]])
        assert fingerprint(client, service.store, earlier) == before
        assert list((service.store / ".staging").iterdir()) == []


def test_job_frozen_mid_capture_is_stopped_at_the_deadline_and_the_job_lives_on(
    own_job, service_factory
):
    grace_s = 3
    service = service_factory([own_job.address], {"PROFILER_CAPTURE_GRACE_S": str(grace_s)})
    with service.client() as client:
        earlier = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
        assert earlier["status"] == "ready", earlier.get("error")

        victim = client.post("/profile", params={"duration": "2s"}).json()
        wait_for_status(client, victim["id"], {"capturing"})
        own_job.wait_for_a_client()  # the job's profiler is tracing: freeze it mid-trace
        os.kill(own_job.proc.pid, signal.SIGSTOP)
        try:
            body = wait_for_status(client, victim["id"], {"ready", "failed"}, timeout_s=60)
        finally:
            frozen_at = own_job.steps()  # no step since SIGSTOP (long before the deadline)
            os.kill(own_job.proc.pid, signal.SIGCONT)
        assert body["status"] == "failed"
        assert body["error"]["code"] == "capture_timeout", body["error"]
        assert f"within {2 + grace_s} s (duration + grace)" in body["error"]["detail"]
        assert client.get("/healthz").status_code == 200
        assert_nothing_half_written(client, service.store, [earlier["id"]])

        # Resumed, the job trains on and can be profiled again.
        own_job.wait_for_step(after=frozen_at)
        assert own_job.proc.poll() is None
        after = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
        assert after["status"] == "ready", after.get("error")
        assert after["summary"]["step_time"]["count"] > 0


def test_every_worker_dying_mid_capture_is_target_lost_naming_them(service_factory):
    jobs = [
        start_job("--workload", "input-bound", "--profiler-port", str(free_port()))
        for _ in range(2)
    ]
    try:
        service = service_factory([f"trainer={jobs[0].address},{jobs[1].address}"])
        with service.client() as client:
            victim = client.post("/profile", params={"duration": "10s"}).json()
            wait_for_status(client, victim["id"], {"capturing"})
            for job in jobs:
                job.wait_for_a_client()  # each worker's profiler is tracing
            for job in jobs:
                job.proc.kill()
                job.proc.wait()
            body = wait_for_status(client, victim["id"], {"ready", "failed"}, timeout_s=60)
    finally:
        for job in jobs:
            job.stop()
    assert body["status"] == "failed"
    assert body["error"]["code"] == "target_lost", body["error"]
    for job in jobs:
        assert job.address.removeprefix("grpc://") in body["error"]["detail"]
    assert "during the capture" in body["error"]["detail"]
