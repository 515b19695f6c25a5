"""Several workers captured at the same moment into one snapshot, with per-worker detail.

The workers are two separate training processes, each with its own profiler server. A real
MultiWorkerMirroredStrategy job (`demo.job --workload multi-worker`) was tried first: TF 2.21
on this machine crashed one of its workers while it was being traced ("double free or
corruption", "munmap_chunk(): invalid pointer"), within one to three captures, at host tracer
levels 2 and 1 alike, which a test cannot build on.
"""

from __future__ import annotations

import pytest
from helpers import free_port, start_job


@pytest.fixture(scope="module")
def uneven_workers():
    fast = start_job("--workload", "input-bound", "--profiler-port", str(free_port()))
    slow = start_job(
        "--workload", "input-bound", "--decode-ms", "6", "--profiler-port", str(free_port())
    )
    yield fast, slow
    fast.stop()
    slow.stop()


def test_workers_are_one_snapshot_and_the_slowest_is_named_the_straggler(
    uneven_workers, service_factory
):
    fast, slow = uneven_workers
    service = service_factory([f"trainer={fast.address},{slow.address}"])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "3s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    slow_host = f"127.0.0.1_{slow.ready['profiler_port']}"
    fast_host = f"127.0.0.1_{fast.ready['profiler_port']}"
    assert sorted(body["hosts"]) == sorted([fast_host, slow_host])
    assert [f["name"] for f in body["files"]] == sorted(f"{h}.xplane.pb" for h in body["hosts"])
    per_host = {h["host"]: h for h in body["summary"]["per_host"]}
    assert set(per_host) == {fast_host, slow_host}
    assert all(h["step_count"] > 5 for h in per_host.values())
    assert per_host[slow_host]["busy_ms_avg"] > 2 * per_host[fast_host]["busy_ms_avg"]
    findings = {f["rule"]: f for f in body["findings"]}
    assert "straggler" in findings, body["findings"]
    assert findings["straggler"]["evidence"]["straggler"] == slow_host
    assert findings["straggler"]["evidence"]["slowed_by"] == "its input pipeline"
