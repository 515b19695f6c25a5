"""The look-back trace on a real TF 2.21 job: its profiler traces continuously, the sidecar drops
the trace every PROFILER_LOOKBACK_TRACE_S, and a capture begins before its trigger."""

from __future__ import annotations

import pytest
from helpers import free_port, start_job, wait_until

LOOKBACK_S = 4


@pytest.fixture
def job():
    job = start_job("--workload", "compute-bound", "--profiler-port", str(free_port()))
    yield job
    job.stop()


def capture(service, duration: str = "1s") -> dict:
    """The snapshot `POST /profile?wait=true` answered: itself when ready, inside the API's
    error shape when it failed."""
    with service.client() as client:
        answer = client.post("/profile", params={"duration": duration, "wait": "true"})
    body = answer.json()
    if answer.status_code >= 400:
        assert body["error"] == body["snapshot"]["error"]["code"], body
        return body["snapshot"]
    return body


def test_a_capture_begins_before_its_trigger_and_holds_the_job_meanwhile(job, service_factory):
    service = service_factory(
        [job.address], {"PROFILER_LOOKBACK_TRACE_S": str(LOOKBACK_S)}, log_level="DEBUG"
    )
    # Two rotations logged: the session began 2 * LOOKBACK_S ago or more, so a capture keeping
    # the trace since the session began, not since the last rotation, would break the bound.
    rotated = f"look-back trace on {job.address.removeprefix('grpc://')} rotated"
    wait_until(
        lambda: service.log.read_text().count(rotated) >= 2,
        60,
        "two rotations of the look-back trace",
        lambda: service.log.read_text()[-3000:],
    )
    body = capture(service)
    assert body["status"] == "ready", body.get("error")
    lookback_s = body["capture"]["lookback_ms"] / 1000
    assert 0 < lookback_s <= LOOKBACK_S + 2  # since the last rotation, never more
    # The trace holds the steps of the look-back and the capture, not of the capture alone.
    steps = body["summary"]["step_time"]
    traced_s = steps["count"] * steps["avg_ms"] / 1000
    assert traced_s >= 0.7 * (1 + lookback_s), (traced_s, lookback_s)
    assert "input_bound" not in {f["rule"] for f in body["findings"]}
    # The sidecar wrote the file itself, from the answer: the usual name, in the store.
    [written] = body["files"]
    assert written["name"] == job.address.removeprefix("grpc://").replace(":", "_") + ".xplane.pb"

    # While the session runs, the job's profiler serves nobody else.
    other = service_factory([job.address], store=service.store.parent / "other")
    refused = capture(other, "500ms")
    assert refused["status"] == "failed"
    assert refused["error"]["code"] == "profiler_busy", refused["error"]

    # Stopping the sidecar stops the session: a plain capture works again.
    service.stop()
    body = capture(other, "500ms")
    assert body["status"] == "ready", body.get("error")
    assert body["capture"]["lookback_ms"] == 0


def test_an_unreachable_job_fails_the_capture_and_the_service_keeps_serving(service_factory):
    service = service_factory(
        [f"grpc://127.0.0.1:{free_port()}"], {"PROFILER_LOOKBACK_TRACE_S": str(LOOKBACK_S)}
    )
    body = capture(service, "200ms")
    assert body["status"] == "failed"
    assert body["error"]["code"] == "target_unreachable", body["error"]
    with service.client() as client:
        assert client.get("/healthz").status_code == 200
