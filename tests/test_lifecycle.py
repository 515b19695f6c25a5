"""One lifecycle: parts start in order and stop in reverse; building starts nothing; a stopped
service leaves no thread of its own; a capture command starts only what a capture needs."""

from __future__ import annotations

import threading

import pytest

from profiler_service.lifecycle import BackgroundLoop, Lifecycle

# The service's background threads, by name (BackgroundLoop names, the analysis spawner).
OWN_THREADS = (
    "store-mirror",
    "grafana-annotations",
    "lookback",
    "capture-scheduler",
    "hub-heartbeat",
    "analysis-spawn",
)


class Part:
    def __init__(self, name: str, log: list[str], fail: bool = False):
        self.name, self.log, self.fail = name, log, fail

    def start(self) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    def stop(self, timeout_s: float | None = None) -> None:
        self.log.append(f"stop {self.name}")


def test_parts_start_in_order_once_and_stop_in_reverse_after_what_was_opened():
    log: list[str] = []
    lifecycle = Lifecycle()
    lifecycle.closing(lambda: log.append("close store"))
    a, b = Part("a", log), Part("b", log)
    lifecycle.start([a, None])
    lifecycle.start([a, b])  # `a` is not started twice
    lifecycle.stop()
    assert log == ["start a", "start b", "stop b", "stop a", "close store"]
    lifecycle.stop()  # nothing left to stop
    assert len(log) == 5


def test_a_part_that_fails_to_start_stops_those_started_before_it():
    log: list[str] = []
    lifecycle = Lifecycle()
    with pytest.raises(RuntimeError, match="c cannot start"):
        lifecycle.start([Part("a", log), Part("b", log), Part("c", log, fail=True)])
    assert log == ["start a", "start b", "stop b", "stop a"]


def test_a_background_loop_runs_until_stopped_and_may_start_again():
    rounds, wake = [], threading.Event()

    def body(stopping: threading.Event) -> None:
        while not stopping.is_set():
            rounds.append(1)
            wake.wait()  # a loop waiting on its own event: `wakes` ends the wait
            wake.clear()

    loop = BackgroundLoop("test-loop", body, wakes=[wake])
    assert not loop.running  # built: nothing runs
    loop.start()
    loop.start()
    assert [t.name for t in threading.enumerate()].count("test-loop") == 1
    loop.stop(timeout_s=10)
    assert not loop.running and rounds
    loop.start()
    assert loop.running
    loop.stop(timeout_s=10)
    assert not loop.running


def own_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith(OWN_THREADS)}


def test_building_starts_nothing_start_starts_in_order_and_stop_leaves_nothing(
    make_service, tmp_path
):
    before = own_threads()
    service = make_service(
        None,  # the real capturers: the look-back trace's too
        targets="trainer=grpc://127.0.0.1:9",
        store_url=(tmp_path / "bucket").as_uri(),
        grafana_url="http://127.0.0.1:9",
        grafana_token="unused",
        schedules=[{"target": "trainer", "interval_s": 3600}],
        hub_url="http://127.0.0.1:9",
        lookback_trace_s=5,
        analysis_worker_idle_s=0,  # no analysis worker process in this test
    )
    assert own_threads() == before  # built, nothing started
    service.start(serving=False)  # what the one-off `capture` command starts
    assert own_threads() - before == {"store-mirror", "store-mirror-list", "grafana-annotations"}
    service.start()  # the API's: the rest, after them
    assert own_threads() - before == {
        "store-mirror",
        "store-mirror-list",
        "grafana-annotations",
        "lookback",
        "lookback-trace-127.0.0.1:9",
        "capture-scheduler",
        "hub-heartbeat",
    }
    service.stop()
    assert own_threads() == before


HUB_THREADS = ("hub-peers", "fleet-sync", "store-mirror")


def hub_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith(HUB_THREADS)}


def test_the_hub_builds_without_starting_starts_in_order_and_stops_in_reverse(tmp_path):
    from profiler_service.config import HubSettings
    from profiler_service.hub.fleet import build_hub

    (tmp_path / "bucket").mkdir()
    before = hub_threads()
    hub = build_hub(
        HubSettings(
            store=tmp_path / "hub",
            store_url=(tmp_path / "bucket").as_uri(),
            api_token="t",
            hub_sync_interval_s=3600,
        )
    )
    assert hub_threads() == before  # built, nothing started
    log: list[str] = []
    for name, part in (("peers", hub.peers), ("fleet-sync", hub.fleet_sync)):
        start, stop = part.start, part.stop

        def started(name=name, start=start) -> None:
            log.append(f"start {name}")
            start()

        def stopped(timeout_s=None, name=name, stop=stop) -> None:
            log.append(f"stop {name}")
            stop(timeout_s)

        part.start, part.stop = started, stopped
    hub.start()
    # The registry share first (it reads the other replicas before the first request), then
    # the sync; both are BackgroundLoops.
    assert hub_threads() - before == {"hub-peers", "fleet-sync"}
    hub.stop()
    assert log == ["start peers", "start fleet-sync", "stop fleet-sync", "stop peers"]
    assert hub_threads() == before


def test_a_pending_lead_up_asks_prometheus_when_started_not_when_built():
    from datetime import UTC, datetime

    from profiler_service.lookback.models import LeadUp, PendingLeadUp, Series

    asked = threading.Event()

    def ask() -> tuple[list[Series], list[str]]:
        asked.set()
        return [Series(name="steps", source="prometheus")], ["asked"]

    now = datetime.now(UTC)
    pending = PendingLeadUp(LeadUp(start=now, end=now), ask, deadline_s=5)
    assert not asked.wait(0.2)  # built: nothing asked, no thread
    assert pending.start() is pending and asked.wait(5)
    pending.start()  # once
    lead_up = pending.result()
    assert [s.name for s in lead_up.series] == ["steps"] and lead_up.notes == ["asked"]
    # Never started: result() asks itself, within the deadline.
    unstarted = PendingLeadUp(LeadUp(start=now, end=now), ask, deadline_s=5)
    assert [s.name for s in unstarted.result().series] == ["steps"]
