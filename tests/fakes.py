"""The test suite's stand-ins, in one place: capturers and analyzers for the decisions around a
capture, a controller for the triggers that ask it, and a clock the test moves.

Each stands in for one stage (the capture, the analysis, the controller a trigger asks): the
stages, store, API and exporters around it are real. Real captures of real jobs are in tests/e2e/.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from profiler_service.capture.capturer import Captured, CaptureFailed, CaptureJob, collect_xplanes
from profiler_service.capture.controller import CaptureRequest, StartOutcome, StartResult
from profiler_service.config import BoundsSettings, CaptureSettings
from profiler_service.errors import CaptureBusy, SnapshotErrorCode


class HeldCapturer:
    """Each capture blocks until `release()` (the decisions under test, such as busy, dedupe
    and cooldown, depend on a capture still running), then fails with `code`."""

    applies_tracer_levels = True

    def __init__(self, code: str = "target_unreachable") -> None:
        self.code = code
        self.started: list[CaptureJob] = []
        self._release = threading.Event()

    def capture(self, job: CaptureJob) -> Captured:
        self.started.append(job)
        self._release.wait(60)
        raise CaptureFailed(self.code, "stand-in capturer: released by the test")

    def release(self) -> None:
        self._release.set()


class FailingCapturer:
    """Fails every capture at once with `code`."""

    applies_tracer_levels = True

    def __init__(self, code: str = "target_unreachable") -> None:
        self.code = code

    def capture(self, job: CaptureJob) -> Captured:
        raise CaptureFailed(self.code, "stand-in capturer")


class RaisingCapturer:
    """Raises `error` from every capture: a failure of the capture stage, or a bug in it."""

    applies_tracer_levels = True

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def capture(self, job: CaptureJob) -> Captured:
        raise self.error


class OutlivesItsDeadline:
    """Traces until the controller cancels it (`job.cancel`, at the deadline), as a hung
    profiler would; `cancelled` and `ended` say it was told and that it stopped."""

    applies_tracer_levels = True

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.ended = threading.Event()

    def capture(self, job: CaptureJob) -> Captured:
        try:
            if job.cancel.wait(60):
                self.cancelled.set()
            raise CaptureFailed(SnapshotErrorCode.CAPTURE_FAILED, "stand-in: stopped")
        finally:
            self.ended.set()


class FailingAnalyzer:
    """An analyzer whose every analysis fails with `failure` (AnalysisFailed)."""

    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    def warm(self) -> None:
        pass

    def analyze(
        self, run_dir: Path, process_memory: object = None, process_cpu: object = None
    ) -> None:
        raise self.failure


class NotedAnalyzer:
    """Wraps an analyzer (the service's own), noting in `events` when an analysis starts."""

    def __init__(self, analyzer: object, events: list[str]):
        self.analyzer = analyzer
        self.events = events

    def __getattr__(self, name: str) -> object:  # warm, close: the analyzer's own
        return getattr(self.analyzer, name)

    def analyze(
        self, run_dir: Path, process_memory: object = None, process_cpu: object = None
    ) -> object:
        self.events.append("analysis started")
        return self.analyzer.analyze(run_dir, process_memory, process_cpu)


class WritesBytes:
    """Writes `payload` where the profiler would (<logdir>/plugins/profile/<id>/worker-0.xplane.pb):
    everything after the capture is real."""

    applies_tracer_levels = True

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def capture(self, job: CaptureJob) -> Captured:
        run = job.logdir / "plugins" / "profile" / job.snapshot_id
        run.mkdir(parents=True)
        (run / "worker-0.xplane.pb").write_bytes(self.payload)
        return collect_xplanes(job)


class RecordingController:
    """Stands in for the capture controller, for a trigger that asks it (`try_start`): records
    the requests and answers started, or busy when `busy`."""

    def __init__(self, busy: bool = False, targets: str = "job=grpc://127.0.0.1:6009"):
        self.requests: list[CaptureRequest] = []
        self.busy = busy
        self.capture = CaptureSettings(targets=[targets])
        self.bounds = BoundsSettings()

    def try_start(self, request: CaptureRequest) -> StartResult:
        if self.busy:
            error = CaptureBusy("a capture of target 'job' is already running")
            return StartResult(StartOutcome.BUSY, error=error)
        self.requests.append(request)
        snapshot = SimpleNamespace(id=f"snap-{len(self.requests)}")
        return StartResult(StartOutcome.STARTED, snapshot=snapshot)


class FakeClock:
    def __init__(self, now_s: float = 1_800_000_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


_KEPT: list[bytearray] = []  # what the trivial job holds on to, as a leaking analysis would


def trivial_job():
    """The warm-worker pool's job without XProf or TensorFlow (`WarmWorkers(job="fakes:trivial_
    job")`): reports the run directory's name; `fail-*` raises, `hang-*` never returns,
    `hold-*` keeps 128 MiB."""

    def job(run_dir: Path) -> str:
        name = run_dir.name
        if name.startswith("fail"):
            raise ValueError(f"cannot read {name}")
        if name.startswith("hang"):
            threading.Event().wait()
        if name.startswith("hold"):
            _KEPT.append(bytearray(128 * 2**20))
        return name

    return job
