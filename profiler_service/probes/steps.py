"""Training step durations, recorded in the job's process: the look-back sampler reads them, the
`/metrics` collector exports them at scrape time (exporters/step_collector.py).

`profiler_service.steps` (the Keras callback and `training_step`) calls `STEP_STATS.observe` once
per marked call: a lock, a bisect and three additions, about a microsecond. A call that runs
several training steps (Keras `steps_per_execution=N`) counts as N steps of a 1/N share each.
Nothing here imports TensorFlow, so the sidecar can import this module without pulling TF in.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

__all__ = ["STEP_BUCKETS_S", "STEP_STATS", "StepStats"]

# Upper bounds in seconds: 1 ms (small models on an accelerator) to a minute (huge steps).
STEP_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class _Series:
    __slots__ = ("count", "counts", "sum_s")

    def __init__(self, n_buckets: int):
        self.counts = [0] * (n_buckets + 1)  # the last one is +Inf
        self.count = 0
        self.sum_s = 0.0


class StepStats:
    """Per-name step counts and a duration histogram; thread-safe, cheap to observe."""

    def __init__(self, buckets_s: Sequence[float] = STEP_BUCKETS_S):
        self.buckets_s = tuple(sorted(buckets_s))
        self._lock = threading.Lock()
        self._series: dict[str, _Series] = {}

    def observe(self, duration_s: float, name: str = "train", steps: int = 1) -> None:
        """Record `steps` training steps that took `duration_s` together.

        The metrics count training steps, not calls, so a call of N steps adds N to the count and
        N observations of `duration_s / N` to the histogram (each step's share of the call).
        """
        if steps < 1:
            return
        i = bisect.bisect_left(self.buckets_s, duration_s / steps)
        with self._lock:
            series = self._series.get(name)
            if series is None:
                series = self._series[name] = _Series(len(self.buckets_s))
            series.counts[i] += steps
            series.count += steps
            series.sum_s += duration_s

    def snapshot(self) -> dict[str, tuple[list[int], int, float]]:
        """{name: (per-bucket counts, count, sum in seconds)}, copied under the lock."""
        with self._lock:
            return {n: (list(s.counts), s.count, s.sum_s) for n, s in self._series.items()}

    def reset(self) -> None:
        with self._lock:
            self._series.clear()


# The process-wide recorder the step markers feed.
STEP_STATS = StepStats()
