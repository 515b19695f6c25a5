"""Scheduled captures: jittered intervals, skipped (not queued) while the target is busy."""

from __future__ import annotations

import random
import threading

from fakes import HeldCapturer

from profiler_service.config import Schedule
from profiler_service.targets import Target
from profiler_service.trigger.schedule import CaptureScheduler


def make(make_service, **settings):
    capturer = HeldCapturer("no_trace_events")
    service = make_service(
        capturer,
        targets=[Target(name="trainer", workers=["127.0.0.1:9"])],
        schedules=[
            Schedule(target="trainer", interval_s=60, jitter_s=30, labels={"model_version": "v7"})
        ],
        **settings,
    )
    return service, capturer


def test_delay_is_the_interval_plus_at_most_the_jitter(make_service):
    service, _ = make(make_service)
    scheduler = CaptureScheduler(service.settings.schedule, service.controller, random.Random(7))
    delays = [scheduler.next_delay_s(service.settings.schedule.schedules[0]) for _ in range(200)]
    assert all(60 <= d <= 90 for d in delays)
    assert max(delays) - min(delays) > 20  # the jitter spreads captures out


def test_a_due_capture_starts_with_its_labels_and_a_busy_target_is_skipped(make_service):
    service, capturer = make(make_service, capture_labels={"cluster": "eu-1"})
    scheduler = CaptureScheduler(service.settings.schedule, service.controller)
    schedule = service.settings.schedule.schedules[0]
    assert scheduler.fire(schedule) == "captured"
    running = service.controller.in_flight()[0]
    assert running.trigger.kind == "schedule"
    assert running.trigger.labels == {"cluster": "eu-1", "model_version": "v7"}
    assert scheduler.fire(schedule) == "skipped_busy"  # not queued behind the running one
    capturer.release()
    assert service.controller.wait(running.id, 30)
    assert scheduler.outcomes == {("trainer", "captured"): 1, ("trainer", "skipped_busy"): 1}


def test_the_loop_fires_when_due_and_stops_promptly(make_service, monkeypatch):
    service, capturer = make(make_service)
    capturer.release()
    scheduler = CaptureScheduler(service.settings.schedule, service.controller)
    monkeypatch.setattr(scheduler, "next_delay_s", lambda schedule: 0.05)
    fired = threading.Event()
    original = scheduler.fire

    def fire(schedule):
        outcome = original(schedule)
        fired.set()
        return outcome

    monkeypatch.setattr(scheduler, "fire", fire)
    scheduler.start()
    assert fired.wait(10)
    scheduler.stop(timeout_s=5)
    assert not scheduler._loop.running


def test_no_schedules_means_no_thread(make_service):
    service = make_service()
    service.start()
    assert not service.scheduler._loop.running


def test_the_schedule_s_outcomes_are_exported_from_zero_per_target(make_service):
    service, capturer = make(make_service)
    scheduler = service.scheduler
    schedule = service.settings.schedule.schedules[0]
    assert scheduler.fire(schedule) == "captured"
    assert scheduler.fire(schedule) == "skipped_busy"
    capturer.release()
    body, _ = service.metrics.render(None)
    lines = body.decode().splitlines()
    for outcome, count in (("captured", 1), ("skipped_busy", 1), ("rejected", 0)):
        series = f'profiler_schedule_captures_total{{outcome="{outcome}",target="trainer"}}'
        assert f"{series} {count:.1f}" in lines, [x for x in lines if "schedule" in x]
