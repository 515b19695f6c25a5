"""The background loops' health at scrape time (lifecycle.py's guard keeps it).

profiler_background_loop_failures_total{loop}   rounds that raised, since the process started
profiler_background_loop_failing_rounds{loop}   rounds failed in a row up to now (0: fine)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from profiler_service.lifecycle import FAILING_AFTER_ROUNDS, LoopHealth

__all__ = ["LoopCollector"]


class LoopCollector:
    """Reads the loops through `loops` (a lifecycle's `loop_health`) at each scrape."""

    def __init__(self, loops: Callable[[], list[LoopHealth]]):
        self.loops = loops

    def collect(self) -> Iterator[Metric]:
        failures = CounterMetricFamily(
            "profiler_background_loop_failures",
            "Rounds of a background loop (the scheduler, the sampler, the bucket mirror, the "
            "fleet sync...) that raised; the loop went on after each.",
            labels=["loop"],
        )
        failing = GaugeMetricFamily(
            "profiler_background_loop_failing_rounds",
            "Rounds of a background loop failed in a row up to now (0: its last round "
            f"worked); from {FAILING_AFTER_ROUNDS}, /readyz names the loop.",
            labels=["loop"],
        )
        for health in self.loops():
            failures.add_metric([health.name], health.failures_total)
            failing.add_metric([health.name], health.failing_rounds)
        yield failures
        yield failing
