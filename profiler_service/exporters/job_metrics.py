"""The training job's own utilisation, for a sidecar deployment (no agent in the job).

In sidecar mode the service has no TensorFlow and cannot see inside the job; the job exposes its
step metrics, TensorFlow device memory, GPUs and process figures itself, on a port of its own:

    from profiler_service.exporters.job_metrics import start_job_metrics_server
    start_job_metrics_server(9464)        # then add the job's pod/port as a scrape target

or, with no code, `PROFILER_JOB_METRICS_PORT=9464` in the job's environment: the step markers
(`ProfilerStepCallback`, `training_step`) start it at their first step
(`PROFILER_JOB_METRICS_ADDR`, default 127.0.0.1, for a Prometheus outside the pod). The sidecar
reads the step timings there (PROFILER_JOB_METRICS_URL) for each snapshot's look-back and
capture cost: they live in the job's process, which the sidecar cannot see into.

The metric names are the same as the agent's, so dashboards work in both modes.
"""

from __future__ import annotations

import logging
import os
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from profiler_service.exporters.gpu_collector import GpuCollector
from profiler_service.exporters.step_collector import StepCollector
from profiler_service.exporters.system_collector import SystemCollector
from profiler_service.exporters.tf_collector import TFMemoryCollector
from profiler_service.probes.steps import STEP_STATS, StepStats

__all__ = [
    "ADDR_ENV",
    "PORT_ENV",
    "job_registry",
    "serve_from_environment",
    "start_job_metrics_server",
]

log = logging.getLogger(__name__)

PORT_ENV = "PROFILER_JOB_METRICS_PORT"
ADDR_ENV = "PROFILER_JOB_METRICS_ADDR"
_serving_lock = threading.Lock()
# What serve_from_environment got, once per process: its server, or None (it could not bind).
_serving: list[WSGIServer | None] = []


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


def serve_from_environment() -> WSGIServer | None:
    """Serve the job's `/metrics` on `PROFILER_JOB_METRICS_PORT` once per process (None when
    unset or it cannot bind: logged, never raised into the training loop)."""
    port = os.environ.get(PORT_ENV, "").strip()
    if not port:
        return None
    with _serving_lock:
        if _serving:
            return _serving[0]
        addr = os.environ.get(ADDR_ENV, "").strip() or "127.0.0.1"
        try:
            server, _ = start_job_metrics_server(int(port), addr=addr)
        except (OSError, ValueError) as exc:
            log.warning("%s=%s: the job's metrics are not served (%s)", PORT_ENV, port, exc)
            _serving.append(None)  # tried once: not again at every step
            return None
        _serving.append(server)
        log.info("the job's step metrics at http://%s:%s/metrics", addr, port)
        return server
