"""Host CPU and memory, and the job-side metrics server for sidecar deployments."""

from __future__ import annotations

import time

import httpx
import psutil
from exporter_helpers import free_port
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from profiler_service.exporters.job_metrics import start_job_metrics_server
from profiler_service.exporters.system_collector import SystemCollector
from profiler_service.probes.steps import STEP_STATS


def values(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_host_cpu_ratio_tracks_a_busy_loop_and_memory_is_consistent():
    collector = SystemCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    values(generate_latest(registry).decode())
    end = time.process_time() + 0.3
    while time.process_time() < end:  # keep one CPU busy between two scrapes
        pass
    m = values(generate_latest(registry).decode())
    cpus = psutil.cpu_count()
    assert m["profiler_host_cpu_count"] == cpus
    # At least our own busy CPU out of all of them (loosely: other work can only add).
    assert 0.5 / cpus <= m["profiler_host_cpu_utilization_ratio"] <= 1.0
    assert 0 < m["profiler_host_memory_used_bytes"] < m["profiler_host_memory_total_bytes"]


def test_job_metrics_server_exposes_steps_for_prometheus():
    port = free_port()
    STEP_STATS.reset()
    for _ in range(4):
        STEP_STATS.observe(0.02, "train")
    server, _ = start_job_metrics_server(port)
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        server.shutdown()
        server.server_close()
    m = values(text)
    assert m["profiler_training_steps_total"] == 4
    assert m["profiler_training_step_duration_seconds_count"] == 4
    assert "profiler_gpu_metrics_available" in m
    assert "process_cpu_seconds_total" in m
