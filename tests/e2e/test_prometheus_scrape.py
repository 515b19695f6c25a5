"""A real Prometheus scrapes the service; the series it stored are read back through its HTTP API.

Prometheus (tests/prometheus_server.py) listens on 127.0.0.1 only, keeps its data under tmp_path,
scrapes every 500 ms, and is stopped by pid.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
from helpers import start_job

if TYPE_CHECKING:
    from prometheus_server import Prometheus

pytest_plugins = ["prometheus_server"]


def nvml_works() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    try:
        return pynvml.nvmlDeviceGetCount() > 0
    finally:
        pynvml.nvmlShutdown()


def assert_histogram_consistent(prom: Prometheus, name: str, selector: str) -> float:
    """Buckets cumulative in `le`, `+Inf` equal to `_count`, all from one instant; returns count."""
    at = time.time()
    buckets = prom.query(f"{name}_bucket{{{selector}}}", at)
    count = prom.value(f"{name}_count{{{selector}}}", at)
    assert buckets and count is not None, name
    by_le = sorted((float(b["metric"]["le"]), float(b["value"][1])) for b in buckets)
    values = [v for _, v in by_le]
    assert values == sorted(values), f"{name} buckets are not cumulative: {by_le}"
    assert by_le[-1][0] == math.inf and by_le[-1][1] == count, (by_le, count)
    return count


def test_prometheus_scrapes_steps_captures_and_store_from_the_agent(tmp_path, prometheus):
    job = start_job("--workload", "input-bound", "--agent", "--store", str(tmp_path / "store"))
    try:
        agent_url = job.ready["agent_url"]
        prom = prometheus({"agent": urlsplit(agent_url).netloc})
        assert prom.wait_for('up{job="agent"}', lambda v: v == 1, what="agent scraped") == 1

        # The steps counter rises while Keras trains.
        steps = 'profiler_training_steps_total{job="agent",name="train"}'
        first = prom.wait_for(steps, lambda v: v > 0, what="steps counter present")
        prom.wait_for(steps, lambda v: v > first, what="steps counter rising")
        assert prom.value(f"rate({steps}[5s])") > 0

        step_hist = 'job="agent",name="train"'
        count = assert_histogram_consistent(
            prom, "profiler_training_step_duration_seconds", step_hist
        )
        assert count > 0
        # Counter and histogram come from the same reading of the recorder.
        at = time.time()
        assert prom.value(steps, at) == prom.value(
            f"profiler_training_step_duration_seconds_count{{{step_hist}}}", at
        )

        # The capture counter moves after a capture; its exemplar names the snapshot.
        ready_captures = (
            'profiler_captures_total{job="agent",target="local",trigger="api",outcome="ready"}'
        )
        assert prom.wait_for(ready_captures, lambda v: True, what="counter at 0") == 0
        before = time.time()
        with httpx.Client(base_url=agent_url, timeout=180) as client:
            response = client.post("/profile", params={"duration": "1s", "wait": "true"})
        assert response.status_code == 200, response.text
        snapshot = response.json()
        assert snapshot["status"] == "ready", snapshot.get("error")
        prom.wait_for(ready_captures, lambda v: v == 1, what="capture counter after a capture")
        exemplars = prom.exemplars(ready_captures, before - 5, time.time() + 5)
        assert {e["labels"].get("snapshot_id") for e in exemplars} == {snapshot["id"]}

        capture_count = assert_histogram_consistent(
            prom, "profiler_capture_duration_seconds", 'job="agent",target="local"'
        )
        assert capture_count == 1
        assert (
            assert_histogram_consistent(
                prom, "profiler_analysis_duration_seconds", 'job="agent",target="local"'
            )
            == 1
        )

        # The store and the latest analysis, as the index sees them.
        assert (
            prom.wait_for('profiler_store_snapshots{job="agent",status="ready"}', lambda v: v == 1)
            == 1
        )
        info = prom.query('profiler_latest_analysis_info{job="agent",target="local"}')
        assert [i["metric"]["snapshot_id"] for i in info] == [snapshot["id"]]
        assert prom.value('profiler_capture_in_progress{job="agent",target="local"}') == 0
        assert prom.value('profiler_gpu_metrics_available{job="agent"}') in (0, 1)
        assert prom.value('process_resident_memory_bytes{job="agent"}') > 0
    finally:
        job.stop()


def test_prometheus_scrapes_the_sidecar_without_training_series(prometheus, service_factory):
    service = service_factory(["grpc://127.0.0.1:9"])  # discard port: nothing is ever sent
    prom = prometheus({"sidecar": urlsplit(service.url).netloc})
    assert prom.wait_for('up{job="sidecar"}', lambda v: v == 1, what="sidecar scraped") == 1
    prom.wait_for('profiler_store_snapshots{job="sidecar",status="ready"}', lambda v: v == 0)
    # Without a GPU, driver or libnvidia-ml (this machine) the service says so with a 0 and a
    # log line instead of failing; where NVML works it says 1.
    if nvml_works():
        assert prom.value('profiler_gpu_metrics_available{job="sidecar"}') == 1
    else:
        assert prom.value('profiler_gpu_metrics_available{job="sidecar"}') == 0
        assert service.log.read_text().count("GPU metrics unavailable") == 1
    assert prom.value('profiler_capture_in_progress{job="sidecar",target="default"}') == 0
    assert 0 <= prom.value('profiler_host_cpu_utilization_ratio{job="sidecar"}') <= 1
    # The sidecar captures another process: it has no training series of its own.
    assert prom.query('{job="sidecar",__name__=~"profiler_training_.*|profiler_tf_.*"}') == []
