"""The look-back ring's newest sample and the memory watch's decisions, at scrape time.

profiler_memory_in_use_bytes{device, source}        memory the watch reads (RSS as `host`)
profiler_memory_capacity_bytes{device, source}      what it is measured against
profiler_memory_watch_time_to_capacity_seconds{device}  the soonest projected run-out
profiler_memory_watch_captures_total{reason, outcome}
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from profiler_service.lookback.sampler import Sampler
from profiler_service.trigger.memory_watch import MemoryWatch, WatchOutcome

__all__ = ["LookbackCollector"]

REASONS = ("share", "growth")
WATCH_OUTCOMES = tuple(WatchOutcome)


class LookbackCollector:
    def __init__(self, sampler: Sampler, watch: MemoryWatch | None):
        self.sampler = sampler
        self.watch = watch

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
        if self.watch is None:
            return
        to_capacity = GaugeMetricFamily(
            "profiler_memory_watch_time_to_capacity",
            "Seconds until the watched memory reaches capacity at its growth over the watch "
            "window (absent while it does not grow).",
            labels=["device"],
            unit="seconds",
        )
        last = self.watch.last
        if last is not None and last.seconds_to_capacity is not None:
            to_capacity.add_metric([last.device], last.seconds_to_capacity)
        yield to_capacity
        captures = CounterMetricFamily(
            "profiler_memory_watch_captures",
            "Memory watch decisions: reason share (crossed PROFILER_MEMORY_WATCH_SHARE) or "
            "growth (full within PROFILER_MEMORY_WATCH_HORIZON_S); outcome captured, busy (a "
            "capture was running), failed.",
            labels=["reason", "outcome"],
        )
        counts = self.watch.outcomes
        for reason in REASONS:
            for outcome in WATCH_OUTCOMES:
                captures.add_metric([reason, outcome], counts.get((reason, outcome), 0))
        yield captures
