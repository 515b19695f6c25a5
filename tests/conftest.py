"""Shared fixtures: real TensorFlow jobs and real service processes on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import Job, ServiceProcess, free_port, start_job, start_service

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


@pytest.fixture(scope="session")
def input_bound_job() -> Iterator[Job]:
    job = start_job("--workload", "input-bound", "--profiler-port", str(free_port()), *SESSION)
    yield job
    job.stop()


@pytest.fixture(scope="session")
def compute_bound_job() -> Iterator[Job]:
    job = start_job("--workload", "compute-bound", "--profiler-port", str(free_port()), *SESSION)
    yield job
    job.stop()


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator:
    started: list[ServiceProcess] = []

    def factory(
        targets: list[str],
        env: dict[str, str] | None = None,
        *extra: str,
        store: Path | None = None,
    ) -> ServiceProcess:
        service = start_service(store or tmp_path / "store", targets, env, *extra)
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
