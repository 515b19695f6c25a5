"""Host CPU and memory, read at scrape time with psutil.

The process's own CPU and memory come from prometheus_client's `ProcessCollector`
(`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), registered beside this one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psutil
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

__all__ = ["SystemCollector"]

_IDLE_FIELDS = ("idle", "iowait")


class SystemCollector:
    """`profiler_host_cpu_utilization_ratio`, `profiler_host_cpu_count`, host memory gauges.

    CPU utilisation is the busy share of all CPUs since the previous scrape (since start-up for
    the first), computed from this collector's own `cpu_times` readings, so it shares no state
    with other psutil users. With several scrapers it is the share since whichever came last.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = _busy_and_total(psutil.cpu_times())

    def _cpu_ratio(self) -> float:
        now = _busy_and_total(psutil.cpu_times())
        with self._lock:
            last, self._last = self._last, now
        d_total = now[1] - last[1]
        if d_total <= 0:
            return 0.0
        return min(1.0, max(0.0, (now[0] - last[0]) / d_total))

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "profiler_host_cpu_utilization_ratio",
            "Busy share (0-1) of all the host's CPUs since the previous scrape.",
            value=self._cpu_ratio(),
            unit="ratio",
        )
        yield GaugeMetricFamily(
            "profiler_host_cpu_count", "Logical CPUs on the host.", value=psutil.cpu_count() or 0
        )
        memory = psutil.virtual_memory()
        yield GaugeMetricFamily(
            "profiler_host_memory_used_bytes",
            "Host memory in use (total minus available).",
            value=memory.total - memory.available,
            unit="bytes",
        )
        yield GaugeMetricFamily(
            "profiler_host_memory_total_bytes",
            "Host memory installed.",
            value=memory.total,
            unit="bytes",
        )


def _busy_and_total(times) -> tuple[float, float]:
    fields = times._asdict()
    # guest time is already counted in user time on Linux.
    total = sum(v for k, v in fields.items() if k not in ("guest", "guest_nice"))
    idle = sum(fields.get(k, 0.0) for k in _IDLE_FIELDS)
    return total - idle, total
