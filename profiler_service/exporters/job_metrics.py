"""The training job's own utilisation, for a sidecar deployment (no agent in the job).

In sidecar mode the service has no TensorFlow and cannot see inside the job; the job exposes its
step metrics, TensorFlow device memory, GPUs and process figures itself, on a port of its own:

    from profiler_service.exporters.job_metrics import start_job_metrics_server
    start_job_metrics_server(9464)        # then add the job's pod/port as a scrape target

The metric names are the same as the agent's, so dashboards work in both modes.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from profiler_service.exporters.gpu_collector import GpuCollector
from profiler_service.exporters.step_collector import StepCollector
from profiler_service.exporters.system_collector import SystemCollector
from profiler_service.exporters.tf_collector import TFMemoryCollector
from profiler_service.probes.steps import STEP_STATS, StepStats

__all__ = ["job_registry", "start_job_metrics_server"]


def job_registry(
    registry: CollectorRegistry | None = None, *, steps: StepStats = STEP_STATS
) -> CollectorRegistry:
    """Register the job-side collectors (steps, TF memory, GPUs, host, process) into `registry`."""
    registry = registry if registry is not None else CollectorRegistry()
    for collector in (
        StepCollector(steps),
        TFMemoryCollector(),
        GpuCollector(),
        SystemCollector(),
        ProcessCollector(registry=None),
    ):
        registry.register(collector)
    return registry


def start_job_metrics_server(
    port: int, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> tuple[WSGIServer, threading.Thread]:
    """Serve `/metrics` for the job on a daemon thread; pass addr="0.0.0.0" inside a pod."""
    return start_http_server(port, addr=addr, registry=job_registry(registry))
