"""A store that cannot be written (a real tmpfs filled to its last byte) refuses captures from
every trigger with `store_not_writable`, leaves nothing half-created, and stops nothing: the
scheduler's, the memory watch's and the webhook's next capture runs once space is back.

The clocks are the triggers' own (`FakeClock`): no test here waits for time to pass.
"""

from __future__ import annotations

import contextlib
import errno
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import FailingCapturer, FakeClock
from fastapi.testclient import TestClient
from fault_helpers import tmpfs

from profiler_service.api.app import create_app
from profiler_service.capture.controller import CaptureRequest, StartOutcome
from profiler_service.config import Schedule, WatchSettings
from profiler_service.lifecycle import BackgroundLoop
from profiler_service.lookback.ring import Sample, SampleRing
from profiler_service.targets import Target
from profiler_service.trigger.memory_watch import MemoryWatch
from profiler_service.trigger.schedule import CaptureScheduler

GIB = 2**30
TRAINER = Target(name="trainer", workers=["127.0.0.1:9"])


@contextlib.contextmanager
def full(store: Path) -> Iterator[None]:
    """Fill the store's filesystem to the last byte; free it afterwards."""
    filler = store / "filler"
    with filler.open("wb", buffering=0) as f:
        for chunk in (65536, 1):
            with contextlib.suppress(OSError):
                while f.write(b"\0" * chunk):
                    pass
    with pytest.raises(OSError) as refused:
        (store / "probe").write_bytes(b"x" * 4096)
    assert refused.value.errno == errno.ENOSPC
    try:
        yield
    finally:
        filler.unlink()
        (store / "probe").unlink(missing_ok=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "store", "4m") as path:
        yield path


def staged(store: Path) -> list[str]:
    staging = store / ".staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


def test_try_start_on_a_full_store_is_rejected_and_leaves_nothing(make_service, store):
    service = make_service(FailingCapturer(), store=store, targets=[TRAINER])
    before = staged(store)
    with full(store):
        result = service.controller.try_start(CaptureRequest(duration_s=1))
        assert result.outcome is StartOutcome.REJECTED
        assert result.error.code == "store_not_writable"
        assert "No space left on device" in result.error.detail
        assert service.controller.in_flight() == []  # the target is not held
        assert staged(store) == before
        assert service.store.entries() == {}  # no index row either
    started = service.controller.try_start(CaptureRequest(duration_s=1))
    assert started.outcome is StartOutcome.STARTED
    assert service.controller.wait(started.snapshot.id, 30)


def test_the_scheduler_counts_the_refusal_and_its_next_capture_runs(make_service, store):
    service = make_service(
        FailingCapturer(),
        store=store,
        targets=[TRAINER],
        schedules=[Schedule(target="trainer", interval_s=60, jitter_s=0)],
    )
    clock = FakeClock()
    scheduler = CaptureScheduler(
        service.settings.schedule, service.controller, random.Random(1), clock
    )
    loop = BackgroundLoop("capture-scheduler", scheduler.round)  # the guard the thread runs
    assert loop.run_round() == 60  # the first capture is due in one interval
    with full(store):
        clock.advance(60)
        assert loop.run_round() == 60
        assert scheduler.outcomes == {("trainer", "rejected"): 1}
        assert staged(store) == []
    clock.advance(60)
    assert loop.run_round() == 60
    assert scheduler.outcomes == {("trainer", "rejected"): 1, ("trainer", "captured"): 1}
    assert loop.health.failures_total == 0  # refused, never raised
    [started] = service.store.entries()
    assert service.controller.wait(started, 30)
    assert service.store.get(started).trigger.kind == "schedule"


def test_the_memory_watch_counts_the_refusal_and_captures_when_space_is_back(make_service, store):
    service = make_service(FailingCapturer(), store=store, targets=[TRAINER])
    clock = FakeClock()
    ring = SampleRing(300)
    watch = MemoryWatch(
        WatchSettings(memory_watch_share=0.9, memory_watch_cooldown_s=600),
        service.controller,
        ring,
        clock=clock,
    )

    def sample(t: float) -> None:
        values = {"memory_in_use_bytes|host": 9.5 * GIB, "memory_capacity_bytes|host": 10 * GIB}
        ring.append(Sample(time=t, values=values))
        watch(Sample(time=t, values=values))

    with full(store):
        sample(0)
    assert watch.outcomes[("share", "rejected")] == 1
    assert staged(store) == []
    clock.advance(1)
    sample(1)  # no cooldown after a refusal: the next sample captures
    assert watch.outcomes[("share", "captured")] == 1


def am_alert(pod: str) -> dict:
    """One firing alert of Alertmanager's webhook payload (version 4)."""
    return {
        "status": "firing",
        "labels": {"alertname": "TrainingGpuUnderused", "pod": pod},
        "annotations": {"profile_duration": "1s"},
        "startsAt": "2026-12-05T12:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": f"fp-{pod}",
    }


def test_a_webhook_batch_on_a_full_store_records_every_alert_and_the_next_captures(
    make_service, store
):
    service = make_service(
        FailingCapturer(),
        store=store,
        targets=[TRAINER, Target(name="evaluator", workers=["127.0.0.1:9"])],
        webhook_target_rules=[
            {"label": "pod", "pattern": "trainer-0", "target": "trainer"},
            {"label": "pod", "pattern": "evaluator-0", "target": "evaluator"},
        ],
        webhook_min_interval_s=0,
    )
    payload = {
        "version": "4",
        "status": "firing",
        "receiver": "profiler-service",
        "alerts": [am_alert("trainer-0"), am_alert("evaluator-0")],
    }
    with TestClient(create_app(service)) as client:
        with full(store):
            answer = client.post("/webhooks/alertmanager", json=payload)
            assert answer.status_code == 202, answer.text
            outcomes = [(a["outcome"], a["reason"]) for a in answer.json()["alerts"]]
            assert outcomes == [("rejected", "store_not_writable")] * 2
            assert staged(store) == []
            assert client.get("/healthz").status_code == 200
            listed = client.get("/profiles")  # the index still answers reads on a full disk
            assert listed.status_code == 200 and listed.json()["count"] == 0, listed.text
        logged = client.get("/webhooks/alerts").json()
        assert logged["counts"] == {"alertmanager": {"rejected": 2}}  # both decided, both kept
        again = client.post("/webhooks/alertmanager", json=payload)
        assert [a["outcome"] for a in again.json()["alerts"]] == ["captured"] * 2
        taken = [a["snapshot_id"] for a in again.json()["alerts"]]
        for snapshot_id in taken:
            service.controller.wait(snapshot_id, 30)
        with full(store):  # what the store holds still answers, from its files and index
            listed = client.get("/profiles").json()
            assert sorted(s["id"] for s in listed["data"]) == sorted(taken)
            assert all(client.get(f"/profiles/{i}").status_code == 200 for i in taken)


def test_readyz_names_a_loop_that_keeps_failing_and_clears_when_it_recovers(make_service):
    service = make_service()
    failing = {"now": True}

    def round() -> float:
        if failing["now"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return 60.0

    class Part:
        # Its thread waits an hour before its first round: the test runs the rounds itself.
        loops = (BackgroundLoop("test-part-loop", round, wait_first=3600),)

        def start(self) -> None:
            self.loops[0].start()

        def stop(self, timeout_s: float | None = None) -> None:
            self.loops[0].stop(timeout_s)

    part = Part()
    service.lifecycle.start([part])
    [loop] = part.loops
    with TestClient(create_app(service)) as client:
        for _ in range(3):
            loop.run_round()
        ready = client.get("/readyz")
        assert ready.status_code == 503
        check = ready.json()["checks"]["loop:test-part-loop"]
        assert "last 3 rounds failed" in check and "No space left on device" in check
        metrics = client.get("/metrics").text
        assert 'profiler_background_loop_failures_total{loop="test-part-loop"} 3.0' in metrics
        assert 'profiler_background_loop_failing_rounds{loop="test-part-loop"} 3.0' in metrics
        failing["now"] = False
        loop.run_round()
        assert client.get("/readyz").json()["checks"]["loop:test-part-loop"] == "ok"
