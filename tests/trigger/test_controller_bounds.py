"""The controller is the one place of policy: it answers started, busy or rejected, and no
trigger gets a capture past `duration_max_s`, whatever it parsed (the memory watch once passed
its own duration unchecked)."""

from __future__ import annotations

import math

import pytest
from fakes import HeldCapturer

from profiler_service.analysis.analyzer import XprofAnalyzer
from profiler_service.capture.controller import (
    CaptureController,
    CaptureRequest,
    StartOutcome,
)
from profiler_service.config import (
    BoundsSettings,
    CaptureSettings,
    MemoryWatchSettings,
    Schedule,
    ScheduleSettings,
    Settings,
)
from profiler_service.lookback.ring import SampleRing
from profiler_service.models import SnapshotStatus
from profiler_service.store import SnapshotStore
from profiler_service.targets import Target, TargetKind
from profiler_service.trigger.memory_watch import MemoryWatch
from profiler_service.trigger.schedule import CaptureScheduler

UNUSED = "127.0.0.1:9"  # the stand-in capturer never dials it


@pytest.fixture
def controller(tmp_path, held: HeldCapturer):
    """A controller built alone, from its own settings groups: a store, the held capturer, an
    analyzer never reached."""
    store = SnapshotStore(tmp_path / "store")
    store.open()
    controller = CaptureController(
        CaptureSettings(targets=[Target(name="trainer", workers=[UNUSED])]),
        BoundsSettings(duration_max_s=10),
        store,
        {TargetKind.GRPC: held},
        XprofAnalyzer(timeout_s=5),
    )
    yield controller
    held.release()
    controller.drain(10)
    store.close()


def test_started_busy_and_rejected(controller, held):
    first = controller.try_start(CaptureRequest(duration_s=2, target="trainer"))
    assert first.outcome is StartOutcome.STARTED and first.error is None
    busy = controller.try_start(CaptureRequest(duration_s=2, target="trainer"))
    assert busy.outcome is StartOutcome.BUSY
    assert busy.snapshot.id == first.snapshot.id  # the capture in the way
    assert busy.error.code == "capture_in_progress" and "Retry-After" in busy.error.headers
    unknown = controller.try_start(CaptureRequest(duration_s=2, target="nope"))
    assert unknown.outcome is StartOutcome.REJECTED and unknown.error.code == "unknown_target"
    held.release()
    assert controller.wait(first.snapshot.id, 10)
    stored = controller.store.get(first.snapshot.id)
    assert stored.status is SnapshotStatus.FAILED and stored.error.code == "target_unreachable"
    assert len(held.started) == 1


@pytest.mark.parametrize("duration_s", [10.001, 60, 0.05, math.inf, math.nan])
def test_a_duration_out_of_bounds_is_rejected_before_anything_starts(controller, held, duration_s):
    result = controller.try_start(CaptureRequest(duration_s=duration_s, target="trainer"))
    assert result.outcome is StartOutcome.REJECTED
    assert (
        result.error.code == "invalid_duration" and "between 100ms and 10s" in result.error.detail
    )
    assert held.started == [] and controller.in_flight() == []
    with pytest.raises(type(result.error)):
        controller.start(CaptureRequest(duration_s=duration_s, target="trainer"))


def test_the_configuration_refuses_a_watch_or_a_schedule_longer_than_the_bound(tmp_path):
    with pytest.raises(ValueError, match="memory_watch_duration_s=120"):
        Settings(store=tmp_path, duration_max_s=60, memory_watch_duration_s=120)
    with pytest.raises(ValueError, match="out of bounds"):
        Settings(
            store=tmp_path,
            targets=[Target(name="trainer", workers=[UNUSED])],
            duration_max_s=60,
            schedules=[Schedule(target="trainer", interval_s=600, duration_s=120)],
        )


def test_no_trigger_exceeds_the_bound_even_past_the_configuration(controller, held):
    """Settings changed without validation (model_copy) still cannot pass the controller."""
    too_long = MemoryWatchSettings().model_copy(
        update={"memory_watch_duration_s": 120.0, "memory_watch_share": 0.5}
    )
    watch = MemoryWatch(too_long, controller, SampleRing(60))
    watch._capture(_reading())
    assert watch.outcomes[("share", "failed")] == 1
    scheduler = CaptureScheduler(ScheduleSettings(), controller)
    assert scheduler.fire(Schedule(target="trainer", interval_s=600, duration_s=120)) == "failed"
    assert held.started == [] and controller.in_flight() == []


def _reading():
    from profiler_service.models import MemoryReading

    return MemoryReading(
        device="host",
        source="proc",
        in_use_bytes=9,
        capacity_bytes=10,
        share=0.9,
        window_s=60,
        reason="share",
    )
