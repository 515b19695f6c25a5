"""One lifecycle: parts start in order and stop in reverse; building starts nothing; a stopped
service leaves no thread of its own; a capture command starts only what a capture needs."""

from __future__ import annotations

import threading

import pytest

from profiler_service.lifecycle import FAILING_AFTER_ROUNDS, RETRY_S, BackgroundLoop, Lifecycle

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

    def round() -> None:
        wake.clear()
        rounds.append(1)  # None: the loop waits for its wake, which stop() sets

    loop = BackgroundLoop("test-loop", round, wake=wake)
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


class Flaky:
    """A round that raises while `failing`; counts its calls."""

    def __init__(self) -> None:
        self.failing, self.calls = True, 0

    def __call__(self) -> float:
        self.calls += 1
        if self.failing:
            raise OSError(28, "No space left on device")
        return 60.0


def test_the_guard_counts_a_failing_round_logs_it_once_and_the_recovery(caplog):
    flaky = Flaky()
    loop = BackgroundLoop("test-guard", flaky)
    waits = [loop.run_round() for _ in range(FAILING_AFTER_ROUNDS + 1)]
    assert waits == sorted(waits) and waits[0] == RETRY_S and waits[-1] > RETRY_S  # backs off
    health = loop.health
    assert health.failures_total == health.failing_rounds == FAILING_AFTER_ROUNDS + 1
    assert health.keeps_failing and "No space left on device" in health.problem()
    logged = [r for r in caplog.records if r.name == "profiler_service.lifecycle"]
    assert len(logged) == 1 and logged[0].exc_info  # once, with its traceback
    flaky.failing = False
    assert loop.run_round() == 60.0  # the round's own wait again
    assert health.failing_rounds == 0 and health.problem() is None
    assert health.failures_total == FAILING_AFTER_ROUNDS + 1  # a counter: it stays
    assert "recovered after 4 failed rounds" in caplog.records[-1].getMessage()


def test_a_loop_whose_rounds_raise_keeps_running_on_its_thread(monkeypatch):
    monkeypatch.setattr("profiler_service.lifecycle.RETRY_S", 0.001)
    flaky, recovered = Flaky(), threading.Event()

    def round() -> float | None:
        if flaky.calls >= 3:
            flaky.failing = False
        flaky()
        recovered.set()
        return None

    loop = BackgroundLoop("test-guard-thread", round)
    loop.start()
    assert recovered.wait(10)  # the thread outlived three failed rounds
    assert loop.running and loop.health.failures_total == 3
    loop.stop(timeout_s=10)
    assert not loop.running and not loop.health.died


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_loop_thread_ended_by_a_base_exception_is_reported_dead():
    def round() -> None:
        raise SystemExit(3)  # a BaseException: the guard lets it end the thread

    loop = BackgroundLoop("test-dies", round)
    loop.start()
    loop._thread.join(10)
    assert loop.health.died and "ended without being stopped" in loop.health.problem()


def test_the_lifecycle_reports_the_running_loops_of_the_parts_it_started():
    class Looping(Part):
        def __init__(self, name: str, log: list[str], runs: bool = True):
            super().__init__(name, log)
            self.runs = runs
            self.loops = (BackgroundLoop(f"{name}-loop", lambda: None),)

        def start(self) -> None:
            if self.runs:  # a scheduler without schedules leaves its loop unstarted
                self.loops[0].start()

        def stop(self, timeout_s: float | None = None) -> None:
            self.loops[0].stop(timeout_s)

    lifecycle = Lifecycle()
    lifecycle.start([Looping("a", []), Part("b", []), Looping("c", [], runs=False)])
    assert [h.name for h in lifecycle.loop_health()] == ["a-loop"]
    lifecycle.stop()
    assert lifecycle.loop_health() == []


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
    before = set(threading.enumerate())
    pending = PendingLeadUp(LeadUp(start=now, end=now), ask, deadline_s=5)
    assert set(threading.enumerate()) - before == set() and not asked.is_set()  # built: idle
    assert pending.start() is pending and asked.wait(5)
    pending.start()  # once
    lead_up = pending.result()
    assert [s.name for s in lead_up.series] == ["steps"] and lead_up.notes == ["asked"]
    # Never started: result() asks itself, within the deadline.
    unstarted = PendingLeadUp(LeadUp(start=now, end=now), ask, deadline_s=5)
    assert [s.name for s in unstarted.result().series] == ["steps"]


def test_a_database_drivers_error_is_not_repeated_by_the_health_answers():
    """/readyz names a failing loop's error; a driver's text names the database's host, port
    and user, so it says only that the database did not answer (the log has the text)."""
    import sqlalchemy.exc

    from profiler_service.lifecycle import public_error

    driver = sqlalchemy.exc.OperationalError(
        "SELECT 1", {}, Exception('connection to server at "db.internal", port 5432 failed')
    )
    said = public_error(driver)
    assert "5432" not in said and "db.internal" not in said and "database" in said
    assert public_error(OSError(28, "No space left on device\nmore")) == (
        "OSError: [Errno 28] No space left on device"
    )
