"""Scheduled captures: each configured target, every interval (plus jitter), bounded like any other.

A due capture that finds its target busy is skipped, not queued: the next one comes at the next
interval. Off unless `PROFILER_SCHEDULES` names at least one target.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter

from profiler_service.capture.controller import (
    CaptureController,
    CaptureRequest,
    StartOutcome,
)
from profiler_service.config import Schedule, ScheduleSettings
from profiler_service.lifecycle import BackgroundLoop
from profiler_service.models import Trigger, TriggerKind

log = logging.getLogger(__name__)
# What a scheduled capture did, as the metrics count it.
_OUTCOME = {
    StartOutcome.STARTED: "started",
    StartOutcome.BUSY: "skipped",
    StartOutcome.REJECTED: "failed",
}


class CaptureScheduler:
    def __init__(
        self,
        settings: ScheduleSettings,
        controller: CaptureController,
        rng: random.Random | None = None,
    ):
        self.settings = settings
        self.controller = controller
        self.rng = rng or random.Random()
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (target, started|skipped|failed)
        self._loop = BackgroundLoop("capture-scheduler", self._run)

    def start(self) -> None:
        """Its thread runs only when a schedule is configured."""
        if self.settings.schedules:
            self._loop.start()

    def stop(self, timeout_s: float | None = None) -> None:
        self._loop.stop(timeout_s)

    def next_delay_s(self, schedule: Schedule) -> float:
        return schedule.interval_s + self.rng.uniform(0, schedule.jitter_s)

    def fire(self, schedule: Schedule) -> str:
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
        outcome = _OUTCOME[result.outcome]
        if result.started:
            log.info("scheduled capture of %s started: %s", schedule.target, result.snapshot.id)
        else:
            log.info("scheduled capture of %s %s: %s", schedule.target, outcome, result.error)
        self.outcomes[(schedule.target, outcome)] += 1
        return outcome

    def _run(self, stopping: threading.Event) -> None:
        now = time.monotonic()
        due = [now + self.next_delay_s(s) for s in self.settings.schedules]
        while not stopping.is_set():
            i = min(range(len(due)), key=due.__getitem__)
            if stopping.wait(max(0.0, due[i] - time.monotonic())):
                return
            self.fire(self.settings.schedules[i])
            due[i] = time.monotonic() + self.next_delay_s(self.settings.schedules[i])
