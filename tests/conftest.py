"""Shared fixtures: real TensorFlow jobs and real service processes on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Job, ServiceProcess, free_port, start_job, start_service

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
