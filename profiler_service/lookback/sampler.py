"""Reads every source once per interval into the ring, then tells the listeners (memory watch)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.lookback.models import LeadUp
from profiler_service.lookback.ring import Sample, SampleRing
from profiler_service.lookback.sources import Source, readings_of, silence_of

log = logging.getLogger(__name__)

NEVER_SAMPLED = (
    "the look-back sampler has taken no sample (it runs beside `serve` and the agent, not a "
    "one-off `profiler-service capture`)"
)


class Sampler(LoopOwner):
    def __init__(
        self,
        ring: SampleRing,
        sources: Sequence[Source],
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ):
        self.ring = ring
        self.sources = list(sources)
        self.interval_s = interval_s
        self.clock = clock  # the samples' time (epoch seconds)
        self.listeners: list[Callable[[Sample], None]] = []
        self._loop = BackgroundLoop("lookback", self.round)
        self._next_at: float | None = None  # time.monotonic() of the next round
        self._failing: set[str] = set()  # sources whose failure was logged already
        self._source_of: dict[str, str] = {}  # reading -> the source's name
        self._first_at: float | None = None  # the first sample's time

    def sample(self) -> Sample:
        """One reading of every source, appended to the ring and handed to the listeners.

        A source that fails is left out of the sample (logged once while it fails); a listener
        that fails does not keep the others from theirs, and its error is raised after them,
        for the loop's guard to count."""
        values: dict[str, float] = {}
        for source in self.sources:
            key = type(source).__name__
            try:
                read = source.read()
            except Exception:
                if key not in self._failing:
                    log.exception("look-back source %s failed; leaving it out", key)
                    self._failing.add(key)
                continue
            self._failing.discard(key)
            values.update(read)
            self._source_of.update((k, source.name) for k in read)
        sample = Sample(time=self.clock(), values=values)
        if self._first_at is None:
            self._first_at = sample.time
        self.ring.append(sample)
        failed: Exception | None = None
        for listener in self.listeners:
            try:
                listener(sample)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
        return sample

    def round(self) -> float:
        """One sample; the wait until the next is due (no burst of samples after a stall)."""
        now = time.monotonic()
        self._next_at = max((self._next_at or now) + self.interval_s, now)
        self.sample()
        return max(0.0, self._next_at - time.monotonic())

    def source_of(self, key: str) -> str:
        """The name of the source a reading came from (agent, proc, nvml)."""
        return self._source_of.get(key, "")

    def lead_up(self, start: datetime, end: datetime) -> LeadUp:
        """The ring's samples between `start` and `end`, one series per reading; what the
        sources are there for but did not read, each with its own reason (a sidecar without the
        job's step timings is told how to get them, not that it just started)."""
        begin, until = start.timestamp(), end.timestamp()
        series = self.ring.series(begin, until, self.source_of)
        read = {s.name for s in series}
        missing: dict[str, str] = {}
        for source in self.sources:
            for reading in readings_of(source):
                if reading not in read:
                    why = NEVER_SAMPLED if self._first_at is None else silence_of(source)
                    missing.setdefault(reading, why)
        if not self.ring.window(begin, until):
            notes = [self._no_samples(begin)]
        elif not series:
            reasons = dict.fromkeys(silence_of(source) for source in self.sources)
            notes = ["the sampler read nothing about the job: " + "; ".join(reasons)]
        else:
            notes = list(dict.fromkeys(missing.values()))
        return LeadUp(start=start, end=end, series=series, notes=notes, missing=missing)

    def _no_samples(self, begin: float) -> str:
        """Why the window holds no sample at all."""
        if self._first_at is None:
            return f"no samples in the look-back window: {NEVER_SAMPLED}"
        if self._first_at > begin:
            return (
                "no samples in the look-back window: the sampler started "
                f"{max(0.0, self.clock() - self._first_at):.0f} s ago"
            )
        return (
            "no samples in the look-back window: the sampler took none in it (its loop "
            "stalled or stopped: profiler_background_loop_* in /metrics)"
        )
