"""Shared fixtures: real TensorFlow jobs and real service processes on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import RECORDS_MEMORY, Job, ServiceProcess, free_port, start_job, start_service
from postgres_server import PostgresServer

from profiler_service.capture.capturer import Capturer
from profiler_service.config import Settings
from profiler_service.service import Service, build_service
from profiler_service.targets import TargetKind

# What the fast part leaves out (`scripts/test -m "not e2e"`): whole jobs and processes end to
# end, and any test that trains a real TensorFlow job for its capture; `slow` marks the ones that
# wait out injected delays.
E2E_DIRS = ("e2e", "compat")
JOB_FIXTURES = {"input_bound_job", "compute_bound_job", "service_factory"}
SLOW_MODULES = {"test_slow_bucket.py", "test_job_faults.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        if set(path.parts) & set(E2E_DIRS) or JOB_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.e2e)
        if path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


# The demo job stops training after --seconds (600 by default); the session's jobs outlive the
# whole suite, which takes longer than that.
SESSION = ("--seconds", "7200")


# The session's jobs once started, by fixture name: paused (SIGSTOP) between the tests that use
# them, so the ~2 cores they train on go to the rest of the suite (Job.pause).
SESSION_JOBS: dict[str, Job] = {}


def _session_job(
    name: str, workload: str, folder: Path, env: dict[str, str] | None = None
) -> Iterator[Job]:
    port = str(free_port())
    job = start_job(
        "--workload", workload, "--profiler-port", port, *SESSION, env=env, clock=folder / "clock"
    )
    SESSION_JOBS[name] = job
    yield job
    SESSION_JOBS.pop(name, None)
    job.stop()  # resumes it first


@pytest.fixture(scope="session")
def input_bound_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    folder = tmp_path_factory.mktemp("input-bound-job")
    yield from _session_job("input_bound_job", "input-bound", folder)


@pytest.fixture(scope="session")
def compute_bound_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    # Its memory is read by tests (test_memory_growth): it records allocator events on any CPU.
    folder = tmp_path_factory.mktemp("compute-bound-job")
    yield from _session_job("compute_bound_job", "compute-bound", folder, RECORDS_MEMORY)


def _needs(item: pytest.Item | None, name: str) -> bool:
    """Whether `item` uses the session job `name`: among its fixtures (the whole closure, module
    fixtures included), or a parameter naming it for `request.getfixturevalue`."""
    if item is None:
        return False
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return name in item.fixturenames or any(p == name for p in params if isinstance(p, str))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any of the item's fixtures is set up (a module fixture may capture from the job).
    # After SIGCONT, the job finishes a step (its own clock says so) before the test captures:
    # the one in flight when it was paused, or its step times would show one as long as the pause.
    for name, job in SESSION_JOBS.items():
        if _needs(item, name):
            steps = job.steps()  # paused: none finishes before SIGCONT
            if job.resume():
                job.wait_for_step(after=steps)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        # After the item's teardown; a job the next test needs as well keeps training.
        for name, job in SESSION_JOBS.items():
            if not _needs(nextitem, name):
                job.pause()


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator:
    started: list[ServiceProcess] = []

    def factory(
        targets: list[str],
        env: dict[str, str] | None = None,
        *extra: str,
        store: Path | None = None,
        log_level: str = "INFO",
    ) -> ServiceProcess:
        store = store or tmp_path / "store"
        service = start_service(store, targets, env, *extra, log_level=log_level)
        started.append(service)
        return service

    yield factory
    for service in started:
        service.stop()


UNUSED_TARGET = "grpc://127.0.0.1:9"  # discard port: nothing listens, nothing is ever sent


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """The one way a test builds a real service in this process: `make_service(capturer,
    start=False, **settings)`, over a store in tmp_path and an unused target unless given.
    `start=True` starts what a capture needs (mirror, annotator); an app's lifespan starts the
    rest. Each is stopped after the test, once its captures in flight are done."""
    built: list[Service] = []

    def make(
        capturer: Capturer | dict[TargetKind, Capturer] | None = None,
        *,
        start: bool = False,
        **settings,
    ) -> Service:
        settings.setdefault("store", tmp_path / "store")
        settings.setdefault("targets", UNUSED_TARGET)
        capturers = capturer
        if capturer is not None and not isinstance(capturer, dict):
            capturers = {TargetKind.GRPC: capturer}
        service = build_service(Settings(**settings), capturers)
        built.append(service)
        if start:
            service.start(serving=False)
        return service

    yield make
    for service in reversed(built):
        for snapshot in service.controller.in_flight():
            service.controller.wait(snapshot.id, 10)
        service.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session (tests/postgres_server.py); each test that
    needs an index asks it for a database of its own."""
    server = PostgresServer().start()
    yield server
    server.stop()
