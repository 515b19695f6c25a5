"""Reads every source once per interval into the ring, then tells the listeners (memory watch)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.lookback.models import LeadUp
from profiler_service.lookback.ring import Sample, SampleRing
from profiler_service.lookback.sources import Source

log = logging.getLogger(__name__)


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
        """The ring's samples between `start` and `end`, one series per reading."""
        series = self.ring.series(start.timestamp(), end.timestamp(), self.source_of)
        notes = [] if series else ["no samples in the look-back window (the sampler just started)"]
        return LeadUp(start=start, end=end, series=series, notes=notes)
