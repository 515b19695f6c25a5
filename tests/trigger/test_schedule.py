"""Scheduled captures: jittered intervals, skipped (not queued) while the target is busy."""

from __future__ import annotations

import random
import threading

from fakes import HeldCapturer

from profiler_service.config import Schedule, Settings
from profiler_service.service import build_service
from profiler_service.targets import Target, TargetKind
from profiler_service.trigger.schedule import CaptureScheduler


def make(tmp_path, **settings):
    capturer = HeldCapturer("no_trace_events")
    config = Settings(
        store=tmp_path / "store",
        targets=[Target(name="trainer", workers=["127.0.0.1:9"])],
        schedules=[
            Schedule(target="trainer", interval_s=60, jitter_s=30, labels={"model_version": "v7"})
        ],
        **settings,
    )
    service = build_service(config, {TargetKind.GRPC: capturer})
    return service, capturer


def test_delay_is_the_interval_plus_at_most_the_jitter(tmp_path):
    service, _ = make(tmp_path)
    scheduler = CaptureScheduler(service.settings, service.controller, random.Random(7))
    delays = [scheduler.next_delay_s(service.settings.schedules[0]) for _ in range(200)]
    assert all(60 <= d <= 90 for d in delays)
    assert max(delays) - min(delays) > 20  # the jitter spreads captures out
    service.close()


def test_a_due_capture_starts_with_its_labels_and_a_busy_target_is_skipped(tmp_path):
    service, capturer = make(tmp_path, capture_labels={"cluster": "eu-1"})
    scheduler = CaptureScheduler(service.settings, service.controller)
    schedule = service.settings.schedules[0]
    assert scheduler.fire(schedule) == "started"
    running = service.controller.in_flight()[0]
    assert running.trigger.kind == "schedule"
    assert running.trigger.labels == {"cluster": "eu-1", "model_version": "v7"}
    assert scheduler.fire(schedule) == "skipped"  # not queued behind the running one
    capturer.release()
    assert service.controller.wait(running.id, 30)
    assert scheduler.outcomes == {("trainer", "started"): 1, ("trainer", "skipped"): 1}
    service.close()


def test_the_loop_fires_when_due_and_stops_promptly(tmp_path, monkeypatch):
    service, capturer = make(tmp_path)
    capturer.release()
    scheduler = CaptureScheduler(service.settings, service.controller)
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
    assert not scheduler._thread.is_alive()
    service.close()


def test_no_schedules_means_no_thread(tmp_path):
    config = Settings(store=tmp_path / "store", targets="grpc://127.0.0.1:9")
    service = build_service(config)
    service.scheduler.start()
    assert service.scheduler._thread is None
    service.close()
