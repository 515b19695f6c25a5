"""The controller is the one place of policy: it answers started, busy or rejected, and no
trigger gets a capture past `duration_max_s`, whatever it parsed (the memory watch once passed
its own duration unchecked): the memory watch, the schedules, the HTTP API, the webhooks and
the CLI are each shown here reaching `try_start()` with 120 s and being refused by it."""

from __future__ import annotations

import math

import pytest
from alert_samples import alertmanager, am_alert, body
from fakes import FakeClock, HeldCapturer
from fastapi.testclient import TestClient

from profiler_service import cli, durations
from profiler_service.analysis.runner.analyzer import XprofAnalyzer
from profiler_service.api.app import create_app
from profiler_service.api.routes import profile_changes
from profiler_service.capture.controller import (
    CaptureController,
    CaptureRequest,
    StartOutcome,
)
from profiler_service.config import (
    BoundsSettings,
    CaptureSettings,
    Schedule,
    ScheduleSettings,
    Settings,
    WatchSettings,
)
from profiler_service.durations import parse_duration
from profiler_service.lookback.ring import SampleRing
from profiler_service.models import SnapshotStatus
from profiler_service.store import SnapshotStore
from profiler_service.targets import Target, TargetKind
from profiler_service.trigger import alerts as alerts_trigger
from profiler_service.trigger.memory_watch import MemoryWatch
from profiler_service.trigger.schedule import CaptureScheduler

UNUSED = "127.0.0.1:9"  # the stand-in capturer never dials it


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def controller(tmp_path, held: HeldCapturer, clock: FakeClock):
    """A controller built alone, from its own settings groups: a store, the held capturer, an
    analyzer never reached, and a clock the test moves."""
    store = SnapshotStore(tmp_path / "store")
    store.open()
    controller = CaptureController(
        CaptureSettings(targets=[Target(name="trainer", workers=[UNUSED])]),
        BoundsSettings(duration_max_s=10),
        store,
        {TargetKind.GRPC: held},
        XprofAnalyzer(timeout_s=5),
        clock=clock,
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


def test_retry_after_counts_down_what_is_left_of_the_running_capture(controller, clock):
    """Busy says when to try again: the rest of the running trace and about 5 s of analysis,
    rounded up, at least 1 s (an overdue capture is about to end)."""
    controller.try_start(CaptureRequest(duration_s=4, target="trainer"))

    def retry_after() -> int:
        busy = controller.try_start(CaptureRequest(duration_s=1, target="trainer"))
        assert busy.outcome is StartOutcome.BUSY
        assert f"retry in about {busy.error.headers['Retry-After']} s" in busy.error.detail
        return int(busy.error.headers["Retry-After"])

    assert retry_after() == 9  # 4 s of trace + 5 s of analysis
    clock.advance(1.5)
    assert retry_after() == 8  # 7.5 s left, rounded up
    clock.advance(6.9)
    assert retry_after() == 1  # 0.6 s left
    clock.advance(60)
    assert retry_after() == 1  # overdue: never 0 or less


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


def test_the_watch_and_the_schedules_cannot_exceed_the_bound_past_the_configuration(
    controller, held
):
    """Settings changed without validation (model_copy) still cannot pass the controller."""
    too_long = WatchSettings().model_copy(update={"duration_s": 120.0, "share": 0.5})
    watch = MemoryWatch(too_long, controller, SampleRing(60))
    watch._capture(_reading())
    assert watch.outcomes[("share", "rejected")] == 1
    scheduler = CaptureScheduler(ScheduleSettings(), controller)
    assert scheduler.fire(Schedule(target="trainer", interval_s=600, duration_s=120)) == "rejected"
    assert held.started == [] and controller.in_flight() == []


@pytest.fixture
def lenient(monkeypatch):
    """Make a trigger's own parsing forget the upper bound (`max_s=inf`), as a trigger that
    parsed wrongly would: whatever gets past it must still be refused by the controller."""

    def patch(module) -> None:
        def parse_without_a_bound(text, **bounds):
            return parse_duration(text, **{**bounds, "max_s": math.inf})

        monkeypatch.setattr(module, "parse_duration", parse_without_a_bound)

    return patch


CONTROLLER_REFUSES = "a capture of 120 s is out of bounds: captures last between 100ms and 10s"


def test_the_http_api_cannot_exceed_the_bound_past_its_own_parsing(make_service, held, lenient):
    lenient(profile_changes)
    service = make_service(duration_max_s=10, duration_default_s=2)
    with TestClient(create_app(service)) as client:
        response = client.post("/profile", params={"duration": "120s", "target": "trainer"})
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "invalid_duration"
        assert CONTROLLER_REFUSES in response.json()["detail"]  # the controller's words
        assert client.get("/profiles").json()["count"] == 0
    assert held.started == [] and service.controller.in_flight() == []


def test_the_webhook_cannot_exceed_the_bound_past_its_own_parsing(make_service, held, lenient):
    lenient(alerts_trigger)
    service = make_service(
        duration_max_s=10,
        duration_default_s=2,
        webhook_target_rules=[{"label": "pod", "pattern": r"trainer-\d+", "target": "trainer"}],
    )
    data = alertmanager(alerts=[am_alert(profile_duration="120s")])
    with TestClient(create_app(service)) as client:
        response = client.post(
            "/webhooks/alertmanager",
            content=body(data),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 202, response.text
        [alert] = response.json()["alerts"]
    assert alert["outcome"] == "rejected" and alert["reason"] == "invalid_duration"
    assert CONTROLLER_REFUSES in alert["detail"]
    assert held.started == [] and service.controller.in_flight() == []


def test_the_cli_cannot_exceed_the_bound_past_its_own_parsing(
    tmp_path, lenient, capsys, monkeypatch
):
    lenient(durations)  # cmd_capture imports parse_duration when it runs
    monkeypatch.setenv("PROFILER_DURATION_MAX_S", "10")
    monkeypatch.setenv("PROFILER_ANALYSIS_WORKER_IDLE_S", "0")  # no analysis worker process
    store = tmp_path / "store"
    target = f"trainer=grpc://{UNUSED}"
    code = cli.main(["capture", "--target", target, "--store", str(store), "--duration", "120s"])
    assert code == 2
    assert f"invalid_duration: {CONTROLLER_REFUSES}" in capsys.readouterr().err
    assert not list(store.glob("plugins/profile/*"))  # nothing begun


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
