"""Scheduled captures: each configured target, every interval (plus jitter), bounded like any other.

A due capture that finds its target busy is skipped, not queued: the next one comes at the next
interval. Off unless `PROFILER_SCHEDULES` names at least one target.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from profiler_service.capture.controller import CaptureController, CaptureRequest
from profiler_service.config import Schedule, ScheduleSettings
from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.models import Trigger, TriggerKind
from profiler_service.trigger.outcomes import START_OUTCOMES, Outcome
from profiler_service.trigger.plugin import TriggerPlugin

log = logging.getLogger(__name__)


class CaptureScheduler(LoopOwner):
    def __init__(
        self,
        settings: ScheduleSettings,
        controller: CaptureController,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.clock = clock
        self.controller = controller
        self.rng = rng or random.Random()
        self.outcomes: Counter[tuple[str, Outcome]] = Counter()  # (target, outcome)
        self._due: list[float] | None = None  # per schedule, on `clock`; set by the first round
        self._loop = BackgroundLoop("capture-scheduler", self.round)

    def start(self) -> None:
        """Its thread runs only when a schedule is configured."""
        if self.settings.schedules:
            self._loop.start()

    def next_delay_s(self, schedule: Schedule) -> float:
        return schedule.interval_s + self.rng.uniform(0, schedule.jitter_s)

    def collect(self) -> Iterator[Metric]:
        """profiler_schedule_captures_total{target, outcome}: every scheduled target's from 0."""
        captures = CounterMetricFamily(
            "profiler_schedule_captures",
            "Scheduled captures by target and outcome: captured, skipped_busy (the target was "
            "being captured; the next comes at the next interval), rejected.",
            labels=["target", "outcome"],
        )
        for target in sorted({s.target for s in self.settings.schedules}):
            for outcome in START_OUTCOMES:
                captures.add_metric([target, outcome], self.outcomes.get((target, outcome), 0))
        yield captures

    def fire(self, schedule: Schedule) -> Outcome:
        """Start one scheduled capture now; returns what happened (for logs and metrics)."""
        duration = schedule.duration_s or self.controller.bounds.duration_default_s
        result = self.controller.try_start(
            CaptureRequest(
                duration_s=duration,
                target=schedule.target,
                trigger=Trigger(
                    kind=TriggerKind.SCHEDULE, source="schedule", labels=schedule.labels
                ),
            )
        )
        outcome = Outcome.of_start(result.outcome)
        if result.started:
            log.info("scheduled capture of %s started: %s", schedule.target, result.snapshot.id)
        else:
            log.info("scheduled capture of %s %s: %s", schedule.target, outcome, result.error)
        self.outcomes[(schedule.target, outcome)] += 1
        return outcome

    def round(self) -> float:
        """Fire the schedule that is due, if one is; the seconds until the next is due.

        The next time is set before the capture is asked for: a capture that raises (the
        loop's guard counts it) is not retried at once but at its next interval.
        """
        now = self.clock()
        if self._due is None:
            self._due = [now + self.next_delay_s(s) for s in self.settings.schedules]
        i = min(range(len(self._due)), key=self._due.__getitem__)
        if self._due[i] <= now:
            schedule = self.settings.schedules[i]
            self._due[i] = now + self.next_delay_s(schedule)
            self.fire(schedule)
        return max(0.0, min(self._due) - self.clock())


PLUGIN = TriggerPlugin(
    TriggerKind.SCHEDULE,
    ScheduleSettings,
    lambda parts: CaptureScheduler(parts.settings, parts.controller),
)
