"""Findings on real workloads: each job yields its own finding, and not the others'."""

from __future__ import annotations

import pytest
from helpers import free_port, start_job


def test_compute_bound_job_gets_no_input_bound_finding(compute_bound_job, service_factory):
    service = service_factory([compute_bound_job.address])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    pipeline = body["summary"]["input_pipeline"]
    assert pipeline["classification"] in {"not", "potentially"}
    assert pipeline["input_share"] < 0.05
    assert "input_bound" not in {f["rule"] for f in body["findings"]}
    assert body["summary"]["op_category_share"]["compute"] > 0.5
    assert body["summary"]["top_ops"][0]["category"] == "compute"


@pytest.fixture(scope="module")
def eager_job():
    job = start_job("--workload", "eager", "--profiler-port", str(free_port()))
    yield job
    job.stop()


def test_eager_loop_of_tiny_ops_gets_the_host_overhead_finding(eager_job, service_factory):
    """On CPU, TF 2.21's trace records no per-op eager stats (host_op_time_eager_percent is 0),
    so the Python dispatch between tiny eager ops shows as XProf's "All Others" time."""
    service = service_factory([eager_job.address])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    findings = {f["rule"]: f for f in body["findings"]}
    assert "host_overhead" in findings, body["findings"]
    assert findings["host_overhead"]["severity"] == "warning"
    assert findings["host_overhead"]["evidence"]["all_others_share"] > 0.15
    assert "tf.function" in findings["host_overhead"]["recommendation"]
    assert "input_bound" not in findings
