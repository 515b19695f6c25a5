"""A real Prometheus for the tests: the `prometheus` fixture (`prometheus({job: "127.0.0.1:PORT"})`
starts one scraping those targets every 500 ms and stops it by pid after the test), and
`module_prometheus`, the same for one shared by a module's tests.

A plain module, like helpers.py. A test module that uses the fixtures registers it as a plugin,
`pytest_plugins = ["prometheus_server"]`, and imports names from it only for type hints (under
TYPE_CHECKING): pytest warns when a plugin was imported before it could rewrite its asserts, and
importing a fixture by name would shadow it in the tests' arguments (ruff's F811).

Prometheus (Debian package `prometheus`, installed by scripts/install-system-packages) listens on
127.0.0.1 only and keeps its data under tmp_path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from helpers import free_port, stop_process, wait_for_http

DEBIAN_PROMETHEUS = "/usr/bin/prometheus"


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or (
        DEBIAN_PROMETHEUS if os.access(DEBIAN_PROMETHEUS, os.X_OK) else None
    )
    if found is None:
        pytest.fail(
            "the prometheus binary is missing (neither on PATH nor at /usr/bin/prometheus): "
            "run scripts/install-system-packages as root, or apt-get install prometheus",
            pytrace=False,
        )
    return found


class Prometheus:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path):
        self.proc, self.url, self.log = proc, url, log

    def stop(self) -> None:
        stop_process(self.proc)

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
        body = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, promql: str, at: float | None = None) -> float | None:
        result = self.query(promql, at)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_for(
        self, promql: str, ok: Callable[[float], bool], timeout_s: float = 60, what: str = ""
    ) -> float:
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            last = self.value(promql)
            if last is not None and ok(last):
                return last
            time.sleep(0.25)
        raise AssertionError(
            f"{what or promql}: Prometheus had {last!r} after {timeout_s} s\n"
            f"targets: {httpx.get(f'{self.url}/api/v1/targets', timeout=10).text[:2000]}"
        )

    def exemplars(self, promql: str, start: float, end: float) -> list[dict]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        body = httpx.get(f"{self.url}/api/v1/query_exemplars", params=params, timeout=10).json()
        assert body["status"] == "success", body
        return [e for series in body["data"] for e in series["exemplars"]]


def start_prometheus(folder: Path, targets: dict[str, str], data: Path | None = None) -> Prometheus:
    """A Prometheus on a free loopback port scraping `targets` ({job_name: "127.0.0.1:PORT"})
    every 500 ms, its config, data and log under `folder`; returns once it is ready. `data`: a
    TSDB folder already written (promtool's blocks), kept for a year."""
    port = free_port()
    home = folder / f"prometheus-{port}"  # one folder each: a test may start two
    home.mkdir(parents=True)
    config = home / "prometheus.yml"
    jobs = "".join(
        f"  - job_name: {name}\n    static_configs:\n      - targets: ['{address}']\n"
        for name, address in targets.items()
    )
    config.write_text(
        f"global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\nscrape_configs:\n{jobs}"
        if jobs
        else "global:\n  scrape_interval: 500ms\n"
    )
    log = home / "prometheus.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={data or home / 'data'}",
                "--storage.tsdb.retention.time=365d",
                f"--web.listen-address=127.0.0.1:{port}",
                "--enable-feature=exemplar-storage",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(proc, f"{url}/-/ready", log, "prometheus", timeout_s=30)
    except BaseException:
        stop_process(proc)
        raise
    return Prometheus(proc, url, log)


def _starter(folder: Callable[[], Path]) -> Iterator[Callable[[dict[str, str]], Prometheus]]:
    prometheus_binary()  # fail before the test body when it is missing
    started: list[Prometheus] = []

    def start(targets: dict[str, str], data: Path | None = None) -> Prometheus:
        started.append(start_prometheus(folder(), targets, data))
        return started[-1]

    try:
        yield start
    finally:
        for prom in started:
            prom.stop()


@pytest.fixture
def prometheus(tmp_path) -> Iterator[Callable[[dict[str, str]], Prometheus]]:
    """prometheus({job_name: "127.0.0.1:PORT"}) -> a running Prometheus scraping those targets."""
    yield from _starter(lambda: tmp_path)


@pytest.fixture(scope="module")
def module_prometheus(tmp_path_factory) -> Iterator[Callable[[dict[str, str]], Prometheus]]:
    """The same, for a module-scoped fixture: what it starts runs until the module's last test."""
    yield from _starter(lambda: tmp_path_factory.mktemp("prometheus"))
