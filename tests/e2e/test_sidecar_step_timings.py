"""A sidecar beside a real job that marks its steps with `ProfilerStepCallback` (the demo's fit
job does): without the job's metrics the snapshot says the sidecar does not read them and how
to (not that the job reports none, nor that the sampler just started); with the job serving
them (PROFILER_JOB_METRICS_PORT) and the sidecar reading them (PROFILER_JOB_METRICS_URL), the
lead-up has the job's step times and the snapshot states what the capture cost the job."""

from __future__ import annotations

import time

import httpx
from helpers import free_port, start_job, wait_until

from profiler_service.exporters.text_report import describe_cost
from profiler_service.models import CaptureCost


def steps_counted(url: str) -> float:
    """The job's `profiler_training_steps_total`, as its metrics port serves it (0 before)."""
    try:
        text = httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return 0.0
    lines = [x for x in text.splitlines() if x.startswith("profiler_training_steps_total{")]
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines)


def test_without_the_job_s_metrics_the_sidecar_names_the_true_cause(
    input_bound_job, service_factory
):
    service = service_factory([input_bound_job.address])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "1s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    cost = body["capture"]["cost"]
    assert cost["ratio"] is None
    assert cost["note"].startswith("unknown: the sidecar does not read the job's step timings")
    assert all(name in cost["note"] for name in ("_JOB_METRICS_URL", "_JOB_METRICS_PORT"))
    notes = body["lead_up"]["notes"]
    assert not any("just started" in note for note in notes), notes
    assert any("PROFILER_JOB_METRICS_URL" in note for note in notes), notes
    line = describe_cost(CaptureCost.model_validate(cost))
    assert line.startswith("what the capture cost the job: unknown (the sidecar does not read")


def test_with_the_job_s_metrics_the_sidecar_states_the_capture_s_cost(service_factory, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    job = start_job(
        "--workload", "input-bound", "--profiler-port", str(free_port()), "--seconds", "300",
        env={"PROFILER_JOB_METRICS_PORT": str(port)},
    )  # fmt: skip
    try:
        service = service_factory([job.address], {"PROFILER_JOB_METRICS_URL": url})
        # A few of the sidecar's one-second samples with steps in them before the trace.
        first = wait_until(lambda: steps_counted(url), 60, "the job's step metrics")
        since = time.monotonic()
        wait_until(
            lambda: time.monotonic() - since > 4 and steps_counted(url) > first + 10,
            60,
            "steps counted over the sidecar's first samples",
        )
        with service.client() as client:
            body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    series = {s["name"]: s for s in body["lead_up"]["series"]}
    assert series["step_time_ms"]["source"] == "job"
    assert sum(v for _, v in series["steps_per_s"]["points"]) > 10
    assert not any("PROFILER_JOB_METRICS" in note for note in body["lead_up"]["notes"])
    cost = body["capture"]["cost"]
    assert cost["source"] == "job", cost
    assert cost["steps_before"] > 0 and cost["steps_during"] > 0, cost
    assert cost["ratio"] is not None and cost["ratio"] > 0, cost
    assert cost["step_ms_before"] > 0 and cost["step_ms_during"] > 0, cost
