"""Helpers the tests share: real TensorFlow jobs and real service processes on loopback.

A plain module, not a conftest: `from conftest import ...` is ambiguous once a test folder has
a conftest of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from profiler_service.demo import run as demo_run

QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "1", "PYTHONUNBUFFERED": "1"}
# What a job sets, as a user would, to record allocator events on any CPU: TF's default CPU
# allocator records none where oneDNN is off (CPUs without AVX-512; scripts/test-without-onednn)
# and for some jobs even where it is on (analysis/readers/memory_events.py). The tests of the memory
# analysis give it to their jobs; the rest of the suite does not depend on it.
RECORDS_MEMORY = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
# What the same job gets with no events at all, whatever this machine's CPU.
RECORDS_NO_MEMORY = {"TF_CPU_ALLOCATOR_USE_BFC": "false", "TF_ENABLE_ONEDNN_OPTS": "0"}
# A small real capture someone recorded (tests/fixtures/gpu-captures/README.md): it analyses to a
# ready snapshot in well under a second, for tests about what happens around the analysis.
RECORDED_CAPTURE = (
    Path(__file__).resolve().parent
    / "fixtures/gpu-captures/aoberai-chess-engine"
    / "logs__fit__20210615-181006__train__2021_06_15_18_10_10/aoberai.xplane.pb"
)


def wait_until(
    predicate: Callable[[], object],
    timeout_s: float = 60,
    what: str = "condition",
    why: Callable[[], str] | None = None,
) -> object:
    """Poll `predicate` until it returns something truthy, and return that; past `timeout_s`,
    raise an AssertionError naming `what` (and what `why()` says, such as a process's log).
    How a test waits for a state: never a fixed sleep, then an assert."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    value = predicate()  # once more: a slow poll may have used the time
    if value:
        return value
    detail = f" {why()}" if why is not None else ""
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}.{detail}")


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`profiler-service ARGS` in a child process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "profiler_service.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **QUIET_TF},
    )


def capture_once(address: str, logdir: Path, snapshot_id: str) -> list[Path]:
    """One real 1 s remote capture of the job at `address`: the files its profiler wrote."""
    from profiler_service.capture.capturer import CaptureJob
    from profiler_service.capture.remote import RemoteCapturer
    from profiler_service.models import CaptureOptions
    from profiler_service.targets import Target

    job = CaptureJob(
        snapshot_id=snapshot_id,
        target=Target(name="job", workers=[address]),
        logdir=logdir,
        attempts=2,
        timeout_s=60,
        options=CaptureOptions(
            duration_ms=1000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
    )
    return RemoteCapturer().capture(job).paths


def stop_process(proc: subprocess.Popen, timeout_s: float = 20) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Job:
    proc: subprocess.Popen
    ready: dict
    paused: bool = False
    clock: Path | None = None  # its --clock-file: a line `time_ns steps` after each train call

    @property
    def address(self) -> str:
        return f"grpc://127.0.0.1:{self.profiler_port}"

    @property
    def profiler_port(self) -> int:
        return int(self.ready["profiler_port"])

    def steps(self) -> int:
        """Steps finished so far, by the job's own clock (`start_job(clock=...)`)."""
        assert self.clock is not None, "the job was started without a clock file"
        try:
            with self.clock.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
                lines = f.read().split(b"\n")[:-1]  # the last may be half written
        except FileNotFoundError:
            return 0
        return int(lines[-1].split()[1]) if lines else 0

    def wait_for_step(self, after: int, timeout_s: float = 60) -> int:
        """Wait until the job has finished more than `after` steps (it trains); the count."""

        def trained() -> int:
            if self.proc.poll() is not None:
                raise AssertionError(f"the job exited ({self.proc.returncode}) after {after} steps")
            return (steps := self.steps()) > after and steps

        return wait_until(trained, timeout_s, f"the job to finish a step past its {after}")

    def has_a_client(self) -> bool:
        """Whether something (a capture's client) holds a connection to the job's profiler."""
        if self.proc.poll() is not None:
            raise AssertionError(f"the job exited ({self.proc.returncode})")
        process = psutil.Process(self.proc.pid)
        connections = getattr(process, "net_connections", None) or process.connections
        return any(
            c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == self.profiler_port
            for c in connections("tcp")
        )

    def wait_for_a_client(self, timeout_s: float = 60) -> None:
        """Wait until a capture's client has connected to the job's profiler: the trace it
        asked for is under way (a grpc:// target is dialled by nothing else)."""
        wait_until(self.has_a_client, timeout_s, "a capture client connected to the job's profiler")

    def stop(self) -> None:
        self.resume()  # a stopped process does not act on SIGTERM
        stop_process(self.proc)

    # The session's jobs (tests/conftest.py) train from their first use to the end of the suite,
    # the compute-bound one on both cores of a small CI machine: SIGSTOP while no test needs
    # them leaves the CPU to the rest of the suite; SIGCONT before a test that does.
    def pause(self) -> None:
        if not self.paused and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGSTOP)
                self.paused = True

    def resume(self) -> bool:
        """SIGCONT if paused; True when it was (and is still there)."""
        if not self.paused:
            return False
        self.paused = False
        if self.proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGCONT)
            return True
        return False


def launch_job(
    *args: str, env: dict[str, str] | None = None, cgroup: Path | None = None
) -> subprocess.Popen:
    """Start a real TF job (profiler_service.demo.job) without waiting for it; in `cgroup` (a
    cgroup v1 directory, see memory_cgroup) from its first instruction when given."""

    def join_cgroup() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.Popen(
        [sys.executable, "-m", "profiler_service.demo.job", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **QUIET_TF, **(env or {})},
        preexec_fn=join_cgroup if cgroup is not None else None,
    )


def wait_ready(proc: subprocess.Popen, timeout_s: float = 180) -> Job:
    """Wait for the job's `READY {json}` line: it is training. A job that never gets there is
    killed."""
    try:
        return Job(proc, demo_run.wait_ready(proc, timeout_s))
    except RuntimeError:
        proc.kill()
        proc.wait()
        raise


def start_job(*args: str, env: dict[str, str] | None = None, clock: Path | None = None) -> Job:
    """A real TF job (profiler_service.demo.job); returns once it is training. `clock`: where
    the job (a fit workload) writes its own clock, which `Job.steps()` reads."""
    extra = ("--clock-file", str(clock)) if clock is not None else ()
    job = wait_ready(launch_job(*args, *extra, env=env))
    job.clock = clock
    return job


@dataclass
class ServiceProcess:
    proc: subprocess.Popen
    url: str
    store: Path
    log: Path

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, **kwargs)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        stop_process(self.proc)


def wait_for_http(
    proc: subprocess.Popen,
    url: str,
    log: Path,
    what: str,
    timeout_s: float = 60,
    answered: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200,
) -> None:
    """Wait until a server process we started answers `url`; raise with its log if it exits
    first or does not answer in time (then it is killed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text()[-3000:]}")
        try:
            if answered(httpx.get(url, timeout=1)):
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(
        f"{what} did not answer {url} within {timeout_s:g} s: {log.read_text()[-3000:]}"
    )


def start_service(
    store: Path,
    targets: list[str],
    env: dict[str, str] | None = None,
    *extra: str,
    log_level: str = "INFO",
) -> ServiceProcess:
    """`profiler-service serve` as its own process on a free loopback port, ready to answer;
    its log (at `log_level`) in `ServiceProcess.log`."""
    port = free_port()
    log = store.parent / f"service-{port}.log"
    args = [
        sys.executable,
        "-m",
        "profiler_service.cli",
        "--log-level",
        log_level,
        "serve",
        "--store",
        str(store),
        "--port",
        str(port),
        *extra,
    ]
    for target in targets:
        args += ["--target", target]
    proc = subprocess.Popen(
        args,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **QUIET_TF, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    wait_for_http(proc, f"{url}/healthz", log, "the service")
    return ServiceProcess(proc, url, store, log)


def wait_for_status(
    client: httpx.Client, snapshot_id: str, statuses: set[str], timeout_s: float = 120
) -> dict:
    """Poll GET /profiles/{id} until its status is one of `statuses`; return the body."""
    deadline = time.monotonic() + timeout_s
    body: dict = {}
    while time.monotonic() < deadline:
        body = client.get(f"/profiles/{snapshot_id}").json()
        if body.get("status") in statuses:
            return body
        time.sleep(0.1)
    raise AssertionError(f"snapshot {snapshot_id} stayed {body.get('status')}, wanted {statuses}")


@contextlib.contextmanager
def xprof_server(logdir: Path) -> Iterator[Callable[[str, dict | None], object]]:
    """`xprof --logdir LOGDIR` on free ports; yields get(route, params) for its profile API."""
    port = free_port()
    proc = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "xprof"), "--logdir", str(logdir),
         "--port", str(port), "--grpc_port", str(free_port())],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **QUIET_TF},
    )  # fmt: skip

    def get(route: str, params: dict | None = None) -> object:
        url = f"http://127.0.0.1:{port}/data/plugin/profile/{route}"
        return httpx.get(url, params=params, timeout=60).json()

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/data/plugin/profile/runs", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        yield get
    finally:
        proc.terminate()
        proc.wait(20)


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def no_process_mentions(text: str, timeout_s: float = 10) -> bool:
    """True once no process's command line mentions `text` (workers die with the service)."""
    deadline = time.monotonic() + timeout_s
    while _processes_mentioning(text) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _processes_mentioning(text) == []


def start_hub(store: Path, env: dict[str, str], port: int | None = None) -> ServiceProcess:
    """`profiler-service hub` as its own process on a loopback port, ready to answer."""
    port = port or free_port()
    log = store.parent / f"hub-{port}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler_service.cli", "hub", "--store", str(store),
         "--port", str(port)],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **QUIET_TF, **env},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for_http(proc, f"{url}/healthz", log, "the hub")
    return ServiceProcess(proc, url, store, log)


def api_routes(routes: list) -> Iterator:
    """Every `APIRoute` of an app's route table, through its included routers (FastAPI >=
    0.16x keeps each `include_router` as one entry): what route-table checks walk."""
    from fastapi.routing import APIRoute

    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from api_routes(included.routes)
        if isinstance(route, APIRoute):
            yield route


CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")


@contextlib.contextmanager
def memory_cgroup(name: str) -> Iterator[Path | None]:
    """A cgroup v1 memory group of its own under this process's, removed afterwards (once the
    processes moved into it are gone); None where the machine allows none (no v1 memory
    controller mounted writable, or not root: a v2-only host would need a delegated subtree)."""
    own = next(
        (line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
         if "memory" in line.split(":", 2)[1].split(",")),
        None,
    )  # fmt: skip
    if own is None or os.geteuid() != 0:
        yield None
        return
    path = CGROUP_MEMORY / own.lstrip("/") / f"{name}-{os.getpid()}"
    try:
        path.mkdir()
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        deadline = time.monotonic() + 30
        while (path / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        path.rmdir()


GPU_CAPTURES = Path(__file__).resolve().parent / "fixtures" / "gpu-captures"


def analyse_copy(run: Path, tmp_path: Path):
    """A fixture run analysed from a copy: XProf writes its cache beside the capture."""
    from profiler_service.analysis.summary import analyse_run

    copy = tmp_path / run.name
    copy.mkdir()
    for path in run.glob("*.xplane.pb"):
        shutil.copy(path, copy / path.name)
    return analyse_run(copy)


def assert_typed_evidence(finding) -> None:
    """A finding's evidence is its rule's declared model (`@rule(..., evidence=Model)`): no key
    the model lacks, and the model, dumped as the rule dumps it, gives back the same JSON (the
    same keys, values and number types)."""
    import json

    from profiler_service.analysis.findings import EVIDENCE

    model = EVIDENCE.get(finding.rule)
    assert model is not None, f"rule {finding.rule!r} declares no evidence model"
    unknown = set(finding.evidence) - set(model.model_fields)
    assert not unknown, f"{finding.rule}'s evidence has keys its model lacks: {sorted(unknown)}"
    typed = model.model_validate(finding.evidence).model_dump(exclude_unset=True)
    assert json.dumps(typed) == json.dumps(finding.evidence), finding.rule
