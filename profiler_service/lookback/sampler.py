"""Reads every source once per interval into the ring, then tells the listeners (memory watch)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from profiler_service.lifecycle import BackgroundLoop
from profiler_service.lookback.models import LeadUp
from profiler_service.lookback.ring import Sample, SampleRing
from profiler_service.lookback.sources import Source

log = logging.getLogger(__name__)


class Sampler:
    def __init__(self, ring: SampleRing, sources: Sequence[Source], interval_s: float = 1.0):
        self.ring = ring
        self.sources = list(sources)
        self.interval_s = interval_s
        self.listeners: list[Callable[[Sample], None]] = []
        self._loop = BackgroundLoop("lookback", self._run)
        self._failing: set[str] = set()  # sources whose failure was logged already
        self._source_of: dict[str, str] = {}  # reading -> the source's name

    def sample(self) -> Sample:
        """One reading of every source, appended to the ring and handed to the listeners."""
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
        sample = Sample(time=time.time(), values=values)
        self.ring.append(sample)
        for listener in self.listeners:
            try:
                listener(sample)
            except Exception:
                log.exception("look-back listener %r failed", listener)
        return sample

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout_s: float | None = None) -> None:
        self._loop.stop(timeout_s)

    def _run(self, stopping: threading.Event) -> None:
        next_at = time.monotonic()
        while not stopping.is_set():
            self.sample()
            next_at += self.interval_s
            stopping.wait(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - self.interval_s)  # no burst after a stall

    def source_of(self, key: str) -> str:
        """The name of the source a reading came from (agent, proc, nvml)."""
        return self._source_of.get(key, "")

    def lead_up(self, start: datetime, end: datetime) -> LeadUp:
        """The ring's samples between `start` and `end`, one series per reading."""
        series = self.ring.series(start.timestamp(), end.timestamp(), self.source_of)
        notes = [] if series else ["no samples in the look-back window (the sampler just started)"]
        return LeadUp(start=start, end=end, series=series, notes=notes)
