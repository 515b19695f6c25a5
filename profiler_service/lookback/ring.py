"""A bounded ring of per-second samples: what the job looked like over the last minutes.

Memory is bounded by construction: `seconds / interval` samples of a few floats each (about
300 samples of 4-8 readings by default, tens of kilobytes).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from profiler_service.lookback.models import Series

# Units of the readings the sources take, by name (a series name is `name` or `name|device`).
UNITS = {
    "step_time_ms": "ms",
    "steps_per_s": "count",
    "memory_in_use_bytes": "bytes",
    "memory_capacity_bytes": "bytes",
    "rss_bytes": "bytes",
    "gpu_utilization_ratio": "ratio",
    "gpu_memory_used_bytes": "bytes",
    "gpu_memory_total_bytes": "bytes",
}


@dataclass(frozen=True)
class Sample:
    time: float  # unix seconds
    values: dict[str, float] = field(default_factory=dict)  # "name" or "name|device" -> value


class SampleRing:
    """Thread-safe; the sampler appends, snapshots and collectors read."""

    def __init__(self, seconds: float, interval_s: float = 1.0):
        self.seconds, self.interval_s = seconds, interval_s
        self._samples: deque[Sample] = deque(maxlen=max(2, math.ceil(seconds / interval_s) + 1))
        self._lock = threading.Lock()

    def append(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)

    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def window(self, start: float, end: float) -> list[Sample]:
        with self._lock:
            return [s for s in self._samples if start <= s.time <= end]

    def __len__(self) -> int:
        with self._lock:
            return len(self._samples)

    def series(self, start: float, end: float, source: Callable[[str], str]) -> list[Series]:
        """The samples between `start` and `end` as one Series per reading; `source` names where
        each reading came from."""
        by_key: dict[str, list[tuple[float, float]]] = {}
        for sample in self.window(start, end):
            for key, value in sample.values.items():
                by_key.setdefault(key, []).append((round(sample.time, 3), value))
        result = []
        for key in sorted(by_key):
            name, _, device = key.partition("|")
            result.append(
                Series(
                    name=name,
                    unit=UNITS.get(name, ""),
                    source=source(key),
                    labels={"device": device} if device else {},
                    points=by_key[key],
                )
            )
        return result
