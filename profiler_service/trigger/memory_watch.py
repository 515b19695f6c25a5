"""The memory watch: a capture before an out-of-memory kill, which an alert would come too late for.

At every look-back sample, for each memory the sources read (the process's RSS against its cgroup
limit, TensorFlow's allocator per GPU, the job's GPU memory through NVML):

    in use >= PROFILER_MEMORY_WATCH_SHARE of capacity                    -> capture (share)
    growing steadily over PROFILER_MEMORY_WATCH_WINDOW_S, reaching capacity
    within PROFILER_MEMORY_WATCH_HORIZON_S at that rate, once at least
    PROFILER_MEMORY_WATCH_GROWTH_MIN_SHARE of capacity is in use         -> capture (growth)

GPU memory read through NVML is what TensorFlow's allocator reserved, not what it uses (TF
reserves most of the device up front unless memory growth is on), so only its growth counts.
A capture is bounded like any other (one at a time per target), and after one the watch waits
PROFILER_MEMORY_WATCH_COOLDOWN_S before the next.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from profiler_service.analysis.readers.fit import fit_line
from profiler_service.capture.controller import CaptureController, CaptureRequest
from profiler_service.config import WatchSettings
from profiler_service.lookback.ring import Sample, SampleRing
from profiler_service.models import MemoryReading, Trigger, TriggerKind
from profiler_service.trigger.outcomes import START_OUTCOMES, Outcome
from profiler_service.trigger.plugin import TriggerParts, TriggerPlugin

log = logging.getLogger(__name__)


# (reading in use, its capacity, whether crossing the share counts) per memory the sources read.
WATCHED = (
    ("memory_in_use_bytes", "memory_capacity_bytes", True),
    ("gpu_memory_used_bytes", "gpu_memory_total_bytes", False),
)
REASONS = ("share", "growth")
MIN_WINDOW_SHARE = 0.5  # the window must be at least half full of samples before growth counts
GROWTH_MIN_R2 = 0.6  # the rise must look like a line, not one spike in a noisy reading


class MemoryWatch:
    def __init__(
        self,
        settings: WatchSettings,
        controller: CaptureController,
        ring: SampleRing,
        source_of=lambda key: "",
        clock: Callable[[], float] = time.monotonic,
    ):
        """Captures through `controller`, of `memory_watch_target` or its first target, for
        `memory_watch_duration_s` or the default duration: the controller's bounds hold.
        `clock` times the cooldown."""
        self.settings = settings
        self.clock = clock
        self.controller = controller
        self.ring = ring
        self.source_of = source_of
        first = controller.capture.target(None)
        self.target = settings.target or (first.name if first else None)
        self.outcomes: Counter[tuple[str, Outcome]] = Counter()  # (reason, outcome)
        self.last: MemoryReading | None = None  # the most pressing reading, for /metrics
        self._cooldown_until = -float("inf")
        self._lock = threading.Lock()

    # A trigger (trigger/plugin.py) with no life of its own: it runs on the sampler's thread.
    def collect(self) -> Iterator[Metric]:
        """profiler_memory_watch_time_to_capacity_seconds{device}: the soonest projected
        run-out; profiler_memory_watch_captures_total{reason, outcome}."""
        to_capacity = GaugeMetricFamily(
            "profiler_memory_watch_time_to_capacity",
            "Seconds until the watched memory reaches capacity at its growth over the watch "
            "window (absent while it does not grow).",
            labels=["device"],
            unit="seconds",
        )
        last = self.last
        if last is not None and last.seconds_to_capacity is not None:
            to_capacity.add_metric([last.device], last.seconds_to_capacity)
        yield to_capacity
        captures = CounterMetricFamily(
            "profiler_memory_watch_captures",
            "Memory watch decisions: reason share (crossed PROFILER_MEMORY_WATCH_SHARE) or "
            "growth (full within PROFILER_MEMORY_WATCH_HORIZON_S); outcome captured, "
            "skipped_busy (a capture was running), rejected.",
            labels=["reason", "outcome"],
        )
        for reason in REASONS:
            for outcome in START_OUTCOMES:
                captures.add_metric([reason, outcome], self.outcomes.get((reason, outcome), 0))
        yield captures

    def __call__(self, sample: Sample) -> None:
        readings = self.readings(sample)
        if not readings:
            return
        self.last = min(readings, key=_urgency)
        fired = [r for r in readings if r.reason]
        if fired and self.target is not None:
            self._capture(min(fired, key=_urgency))

    def readings(self, sample: Sample) -> list[MemoryReading]:
        """Every watched memory in this sample, with `reason` set where it calls for a capture."""
        s = self.settings
        interval = self.ring.interval_s
        window = self.ring.window(sample.time - s.window_s, sample.time)
        found = []
        for in_use_name, capacity_name, share_counts in WATCHED:
            for key, in_use in sample.values.items():
                name, _, device = key.partition("|")
                if name != in_use_name:
                    continue
                capacity = sample.values.get(f"{capacity_name}|{device}")
                share = in_use / capacity if capacity else None
                rate = _growth_per_s(
                    [(w.time, w.values[key]) for w in window if key in w.values],
                    minimum=max(3, MIN_WINDOW_SHARE * s.window_s / interval),
                )
                to_capacity = (
                    max(0.0, capacity - in_use) / rate if capacity and rate and rate > 0 else None
                )
                reason = ""
                if share_counts and share is not None and share >= s.share:
                    reason = "share"
                elif (
                    to_capacity is not None
                    and to_capacity <= s.horizon_s
                    and (share is None or share >= s.growth_min_share)
                ):
                    reason = "growth"
                found.append(
                    MemoryReading(
                        device=device or "host",
                        source=self.source_of(key),
                        in_use_bytes=int(in_use),
                        capacity_bytes=int(capacity) if capacity else None,
                        share=round(share, 4) if share is not None else None,
                        bytes_per_s=round(rate, 1) if rate is not None else None,
                        window_s=s.window_s,
                        seconds_to_capacity=round(to_capacity, 1)
                        if to_capacity is not None
                        else None,
                        reason=reason,
                    )
                )
        return found

    def _capture(self, reading: MemoryReading) -> None:
        with self._lock:
            if self.clock() < self._cooldown_until:
                return
            s = self.settings
            duration = s.duration_s or self.controller.bounds.duration_default_s
            result = self.controller.try_start(
                CaptureRequest(
                    duration_s=duration,
                    target=self.target,
                    trigger=Trigger(
                        kind=TriggerKind.MEMORY_WATCH,
                        source=f"memory_watch ({reading.reason}, {reading.device})",
                        labels={"device": reading.device},
                        memory=reading,
                    ),
                )
            )
            outcome = Outcome.of_start(result.outcome)
            if not result.started:
                log.info("memory watch did not capture %s: %s", self.target, result.error)
            else:
                snapshot = result.snapshot
                self._cooldown_until = self.clock() + s.cooldown_s
                log.warning(
                    "memory watch: %s at %s of capacity, %s s to full; capturing %s as %s",
                    reading.device,
                    reading.share,
                    reading.seconds_to_capacity,
                    self.target,
                    snapshot.id,
                )
            self.outcomes[(reading.reason, outcome)] += 1


def _urgency(reading: MemoryReading) -> tuple[int, float]:
    """Readings that call for a capture first, then the soonest to run out."""
    return (
        0 if reading.reason else 1,
        reading.seconds_to_capacity if reading.seconds_to_capacity is not None else float("inf"),
    )


def _growth_per_s(points: list[tuple[float, float]], minimum: float) -> float | None:
    """Bytes per second over the window when it is full enough; 0 unless the rise is line-like."""
    if len(points) < minimum:
        return None
    slope, r2 = fit_line(points)
    return slope if r2 >= GROWTH_MIN_R2 else 0.0


def _build(parts: TriggerParts[WatchSettings]) -> MemoryWatch | None:
    """On where the look-back sampler runs and `PROFILER_MEMORY_WATCH` is on: it hears every
    sample."""
    if parts.sampler is None or not parts.settings.enabled:
        return None
    watch = MemoryWatch(
        parts.settings, parts.controller, parts.sampler.ring, parts.sampler.source_of
    )
    parts.sampler.listeners.append(watch)
    return watch


PLUGIN = TriggerPlugin(TriggerKind.MEMORY_WATCH, WatchSettings, _build)
