"""A real two-worker MultiWorkerMirroredStrategy job on loopback, captured as one snapshot."""

from __future__ import annotations

import json

import pytest
from helpers import free_port, launch_job, wait_ready


@pytest.fixture(scope="module")
def two_workers_one_slow():
    """Worker 1 decodes its records 3x slower: the straggler worker 0 waits for every step."""
    cluster = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    procs = []
    for index, decode_ms in enumerate(("2", "6")):
        tf_config = {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}
        procs.append(
            launch_job(
                "--workload",
                "multi-worker",
                "--decode-ms",
                decode_ms,
                "--profiler-port",
                str(free_port()),
                "--seconds",
                "300",
                env={"TF_CONFIG": json.dumps(tf_config)},
            )
        )
    jobs = [wait_ready(p) for p in procs]  # both must be up before either can step
    yield jobs
    for job in jobs:
        job.stop()


def test_both_workers_in_one_snapshot_and_the_straggler_is_named(
    two_workers_one_slow, service_factory
):
    fast, slow = two_workers_one_slow
    service = service_factory([f"trainer={fast.address},{slow.address}"])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "3s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    fast_host = f"127.0.0.1_{fast.ready['profiler_port']}"
    slow_host = f"127.0.0.1_{slow.ready['profiler_port']}"
    assert sorted(body["hosts"]) == sorted([fast_host, slow_host])
    assert len(body["workers"]) == 2
    per_host = {h["host"]: h for h in body["summary"]["per_host"]}
    assert set(per_host) == {fast_host, slow_host}
    # Synchronous steps: equal step times, but the slow worker is busy while the other waits.
    assert (
        per_host[slow_host]["breakdown_avg"]["input_ms"]
        > 2 * per_host[fast_host]["breakdown_avg"]["input_ms"]
    )
    findings = {f["rule"]: f for f in body["findings"]}
    assert "straggler" in findings, body["findings"]
    assert findings["straggler"]["evidence"]["straggler"] == slow_host
    assert findings["straggler"]["evidence"]["slowed_by"] == "its input pipeline"
