"""One failure type for the pipeline, typed worker endings: each way a capture or an analysis
ends without a snapshot is stored with a code of `SnapshotErrorCode`, files kept or not as its
failure class says. No TensorFlow, no XProf: stand-in capturers, analyzers and workers."""

from __future__ import annotations

import signal
import sys
import textwrap
from pathlib import Path

import pytest
from fakes import FailingAnalyzer, OutlivesItsDeadline, RaisingCapturer, WritesBytes

from profiler_service.analysis.runner.analyzer import AnalysisFailed, XprofAnalyzer
from profiler_service.capture.capturer import CaptureFailed, Capturer
from profiler_service.capture.controller import CaptureController, CaptureRequest
from profiler_service.child_process import Ending, WorkerRun, run_worker
from profiler_service.config import BoundsSettings, CaptureSettings
from profiler_service.errors import PipelineFailure, SnapshotErrorCode
from profiler_service.models import Snapshot, SnapshotError, SnapshotStatus
from profiler_service.store import SnapshotStore
from profiler_service.targets import Target, TargetKind


@pytest.fixture
def store(tmp_path):
    store = SnapshotStore(tmp_path / "store")
    store.open()
    yield store
    store.close()


def _run(store: SnapshotStore, capturer: Capturer, analyzer=None) -> Snapshot:
    capture = CaptureSettings(targets=[Target(name="job", workers=["127.0.0.1:9"])])
    analyzer = analyzer or FailingAnalyzer(AnalysisFailed("analysis_failed", "unused"))
    controller = CaptureController(
        capture, BoundsSettings(), store, {TargetKind.GRPC: capturer}, analyzer
    )
    snapshot = controller.start(CaptureRequest(duration_s=0.1))
    assert controller.wait(snapshot.id, 30)
    done = store.get(snapshot.id)
    assert done is not None and done.status is SnapshotStatus.FAILED
    return done


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (CaptureFailed(SnapshotErrorCode.PROFILER_BUSY, "busy"), SnapshotErrorCode.PROFILER_BUSY),
        (RuntimeError("a bug"), SnapshotErrorCode.INTERNAL_ERROR),
    ],
)
def test_a_capture_failure_is_stored_with_its_code_and_no_files(store, error, code):
    done = _run(store, RaisingCapturer(error))
    assert done.error.code is code  # read back from snapshot.json: the enum, not a bare string
    assert done.files == []
    if code is SnapshotErrorCode.INTERNAL_ERROR:
        assert done.error.detail == "RuntimeError: a bug"


def test_an_analysis_failure_keeps_the_capture(store):
    failure = AnalysisFailed(SnapshotErrorCode.ANALYSIS_TOO_LARGE, "too big")
    done = _run(store, WritesBytes(b"\x0a\x00"), FailingAnalyzer(failure))
    assert (done.error.code, done.error.detail) == (SnapshotErrorCode.ANALYSIS_TOO_LARGE, "too big")
    assert store.file_path(done.id, "worker-0.xplane.pb").exists()


def test_both_failures_are_one_type_and_say_whether_their_files_are_kept():
    assert issubclass(CaptureFailed, PipelineFailure) and not CaptureFailed.keep_files
    assert issubclass(AnalysisFailed, PipelineFailure) and AnalysisFailed.keep_files


def test_a_stored_code_this_version_does_not_know_still_loads():
    """A newer sidecar's snapshot in a shared bucket must not make the whole snapshot unreadable."""
    error = SnapshotError.model_validate_json('{"code": "from_a_newer_sidecar", "detail": "d"}')
    assert error.code == "from_a_newer_sidecar"
    assert error.model_dump_json() == '{"code":"from_a_newer_sidecar","detail":"d"}'
    known = SnapshotError.model_validate_json('{"code": "target_lost", "detail": "d"}')
    assert known.code is SnapshotErrorCode.TARGET_LOST
    assert known.model_dump_json() == '{"code":"target_lost","detail":"d"}'


class Pool:
    """A warm-worker pool whose every run ends as told."""

    def __init__(self, run: WorkerRun):
        self._run = run

    def run(self, run_dir: Path, timeout_s: float, max_rss_bytes: int | None) -> WorkerRun:
        return self._run

    def warm(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("run", "code", "words"),
    [
        (WorkerRun(Ending.TIMED_OUT), SnapshotErrorCode.ANALYSIS_TIMEOUT, "within 7 s"),
        (WorkerRun(Ending.OVER_MEMORY), SnapshotErrorCode.ANALYSIS_TOO_LARGE, "memory limit"),
        (WorkerRun.exited(-9), SnapshotErrorCode.ANALYSIS_TOO_LARGE, "OOM killer"),
        (WorkerRun.exited(-15), SnapshotErrorCode.ANALYSIS_FAILED, "killed by SIGTERM"),
        (WorkerRun.exited(3), SnapshotErrorCode.ANALYSIS_FAILED, "exit status 3"),
        (
            WorkerRun(Ending.FAILED, stderr="ToolFailed: bad proto"),
            SnapshotErrorCode.ANALYSIS_FAILED,
            "bad proto",
        ),
    ],
)
def test_each_way_an_analysis_worker_ends_is_its_code(tmp_path, run, code, words):
    analyzer = XprofAnalyzer(timeout_s=7, python=Path(sys.executable), workers=Pool(run))
    with pytest.raises(AnalysisFailed) as failed:
        analyzer.analyze(tmp_path)
    assert failed.value.code is code
    assert words in failed.value.detail


def test_a_return_code_is_read_once_into_how_the_worker_ended():
    killed = WorkerRun.exited(-signal.SIGKILL)
    assert (killed.ending, killed.killed_by, killed.oom_killed) == (
        Ending.KILLED,
        signal.SIGKILL,
        True,
    )
    assert not WorkerRun.exited(-signal.SIGTERM).oom_killed
    exited = WorkerRun.exited(0)
    assert (exited.ending, exited.exit_code, exited.oom_killed) == (Ending.EXITED, 0, False)


@pytest.mark.parametrize(
    ("how", "ending"),
    [
        ("report", Ending.REPORTED),
        ("exit", Ending.EXITED),
        ("kill", Ending.KILLED),
        ("hang", Ending.TIMED_OUT),
        ("grow", Ending.OVER_MEMORY),
    ],
)
def test_run_worker_says_how_a_real_child_ended(tmp_path, monkeypatch, how, ending):
    (tmp_path / "child_stand_in.py").write_text(
        textwrap.dedent(
            """
            import os, signal, sys, time
            how = sys.argv[1]
            if how == "report":
                print("MARK done", flush=True)
            elif how == "exit":
                sys.exit(3)
            elif how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif how == "grow":
                held = b"x" * (256 * 2**20)
                time.sleep(30)  # holding it: the fault, not a wait
            else:
                time.sleep(30)  # hung: the fault, not a wait
            """
        )
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    run = run_worker("child_stand_in", [how], "MARK ", timeout_s=3, max_rss_bytes=128 * 2**20)
    assert run.ending is ending
    assert (run.result == "done") is (ending is Ending.REPORTED)
    if ending is Ending.EXITED:
        assert run.exit_code == 3 and run.how_it_ended() == "exit status 3"
    if ending is Ending.KILLED:
        assert run.oom_killed  # SIGKILL we did not send: read as the kernel's OOM killer


def test_a_trace_past_its_deadline_is_cancelled_before_its_target_is_freed(store):
    capturer = OutlivesItsDeadline()
    capture = CaptureSettings(targets=[Target(name="job", workers=["127.0.0.1:9"])])
    controller = CaptureController(
        capture,
        BoundsSettings(capture_grace_s=0.1),
        store,
        {TargetKind.GRPC: capturer},
        FailingAnalyzer(AnalysisFailed("analysis_failed", "unused")),
    )
    snapshot = controller.start(CaptureRequest(duration_s=0.1))
    assert controller.wait(snapshot.id, 60)
    assert store.get(snapshot.id).error.code == "capture_timeout"
    assert capturer.cancelled.is_set() and capturer.ended.is_set()  # before the target is free
