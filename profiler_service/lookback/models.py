"""What a snapshot keeps of the minutes before it: named time series, the same shape whatever
their source (the service's own sampler, or Prometheus's `query_range`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, Field


class Series(BaseModel):
    """One time series: `points` are `[unix seconds, value]`, oldest first."""

    name: str  # step_time_ms, memory_in_use_bytes, rss_bytes, ... or a configured PromQL name
    unit: str = ""  # ms, bytes, ratio, count
    source: str  # "agent", "proc", "nvml", "prometheus"
    labels: dict[str, str] = Field(default_factory=dict)
    query: str | None = None  # the PromQL sent, after templating (Prometheus series only)
    points: list[tuple[float, float]] = Field(default_factory=list)


class LeadUp(BaseModel):
    """The samples from `start` to `end`: the look-back before the capture and the capture."""

    start: datetime
    end: datetime
    series: list[Series] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # what could not be read, and why
    # Readings the sampler is there for but took none of in the window, each with why
    # (lookback/sources.py): step_time_ms's tells what a capture cost the job (capture/cost.py).
    missing: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class CaptureWindow:
    """What a lead-up reads of its capture, built from the snapshot by the capture's side
    (capture/snapshot_steps.py), so the look-back reads no snapshot: when the capture ran and
    was triggered, and what Prometheus's queries name."""

    started: datetime  # the capture's start (before it started: the snapshot's creation)
    end: datetime  # the capture's end (before it ended: now)
    triggered: datetime  # the earlier of the alert's `startsAt` and the snapshot's creation
    target: str
    labels: dict[str, str] = field(default_factory=dict)  # the trigger's
    pod: str | None = None
    namespace: str | None = None


class PendingLeadUp:
    """A snapshot's lead-up while Prometheus may still be answering: `now` (the ring's samples,
    which the memory rules read before analysis) at once, and Prometheus's series merged in by
    `result()`, so a slow Prometheus runs beside the analysis instead of before it.

    Built, it asks nothing: `start()` (the controller's, once the trace is done) sends the
    queries on a thread; `result()` starts them itself when nobody did."""

    def __init__(
        self,
        now: LeadUp,
        ask: Callable[[], tuple[list[Series], list[str]]] | None = None,
        deadline_s: float = 0.0,
    ):
        self.now = now
        self._ask = ask
        self._deadline_s = deadline_s
        self._found: tuple[list[Series], list[str]] | None = None
        self._thread: threading.Thread | None = None
        self._started = False

    def start(self) -> PendingLeadUp:
        """Send Prometheus's queries beside the caller (once; nothing to send, nothing runs)."""
        if self._started:
            return self
        self._started = True
        ask = self._ask
        if ask is not None:

            def run() -> None:
                self._found = ask()

            self._thread = threading.Thread(target=run, name="lead-up-prometheus", daemon=True)
            self._thread.start()
        return self

    def result(self) -> LeadUp:
        """`now` with Prometheus's series and notes; waits at most what is left of the deadline
        (the queries keep to it themselves; the margin is for a thread that did not)."""
        self.start()
        if self._thread is not None:
            self._thread.join(self._deadline_s + _JOIN_MARGIN_S)
            found, self._thread = self._found, None
            if found is None:
                self.now.notes.append(
                    f"Prometheus's lead-up did not end within {self._deadline_s:g} s: left out"
                )
            else:
                self.now.series += found[0]
                self.now.notes += found[1]
                self._found_in_prometheus(found[0])
        return self.now

    def _found_in_prometheus(self, series: list[Series]) -> None:
        """A reading the sampler missed that Prometheus gave is missing no more (a sidecar's
        step times from the job's metrics, scraped): its note goes too."""
        for name in {s.name for s in series if s.points} & set(self.now.missing):
            why = self.now.missing.pop(name)
            if why not in self.now.missing.values() and why in self.now.notes:
                self.now.notes.remove(why)


_JOIN_MARGIN_S = 5.0
