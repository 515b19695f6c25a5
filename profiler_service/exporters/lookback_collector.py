"""The look-back ring's newest sample, at scrape time (the memory watch's own metrics:
trigger/memory_watch.py).

profiler_memory_in_use_bytes{device, source}        memory the watch reads (RSS as `host`)
profiler_memory_capacity_bytes{device, source}      what it is measured against
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from profiler_service.lookback.sampler import Sampler

__all__ = ["LookbackCollector"]


class LookbackCollector:
    def __init__(self, sampler: Sampler):
        self.sampler = sampler

    def collect(self) -> Iterator[Metric]:
        in_use = GaugeMetricFamily(
            "profiler_memory_in_use_bytes",
            "Memory the look-back sampler read last: the process's RSS (device=host) or "
            "TensorFlow's allocator per GPU; source: agent, proc (the job's /proc).",
            labels=["device", "source"],
            unit="bytes",
        )
        capacity = GaugeMetricFamily(
            "profiler_memory_capacity_bytes",
            "What that memory is measured against: the cgroup limit (else the host's memory), "
            "or the GPU's memory.",
            labels=["device", "source"],
            unit="bytes",
        )
        latest = self.sampler.ring.latest()
        for key, value in sorted((latest.values if latest else {}).items()):
            name, _, device = key.partition("|")
            family = {"memory_in_use_bytes": in_use, "memory_capacity_bytes": capacity}.get(name)
            if family is not None:
                family.add_metric([device, self.sampler.source_of(key)], value)
        yield in_use
        yield capacity
