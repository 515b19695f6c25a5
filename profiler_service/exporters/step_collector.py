"""`profiler_training_steps_total` and the step duration histogram: the step probe, exported."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric

from profiler_service.probes.steps import STEP_STATS, StepStats

__all__ = ["StepCollector"]


class StepCollector:
    """`profiler_training_steps_total` and `profiler_training_step_duration_seconds`."""

    def __init__(self, stats: StepStats = STEP_STATS):
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        steps = CounterMetricFamily(
            "profiler_training_steps",
            "Training steps finished in this process (Keras callback or training_step); a "
            "call that runs N steps (steps_per_execution) counts N.",
            labels=["name"],
        )
        durations = HistogramMetricFamily(
            "profiler_training_step_duration_seconds",
            "Wall time of one training step, from the step marker's start to its end (a call of "
            "N steps: N observations of 1/N of its time).",
            labels=["name"],
            unit="seconds",
        )
        bounds = [*(_le(b) for b in self.stats.buckets_s), "+Inf"]
        for name, (counts, count, sum_s) in sorted(self.stats.snapshot().items()):
            steps.add_metric([name], count)
            cumulative, running = [], 0
            for le, n in zip(bounds, counts, strict=True):
                running += n
                cumulative.append((le, running))
            durations.add_metric([name], cumulative, sum_s)
        yield steps
        yield durations


def _le(bound: float) -> str:
    return repr(float(bound))
