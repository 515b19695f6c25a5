"""The warm analysis workers, on a real capture of a real Keras job: reused, retired, bounded.

Processes are told apart by their pids, which the pool reports with each run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from helpers import capture_once

from profiler_service.analysis.analyzer import AnalysisFailed, XprofAnalyzer
from profiler_service.analysis.summary import AnalysisResult
from profiler_service.analysis.warm_workers import WarmWorkers
from profiler_service.child_process import Ending


@pytest.fixture(scope="module")
def capture(compute_bound_job, tmp_path_factory) -> list[Path]:
    return capture_once(
        compute_bound_job.address, tmp_path_factory.mktemp("capture"), "warm-workers"
    )


@pytest.fixture
def run_dir(capture, tmp_path):
    """A fresh copy for each analysis: XProf caches its results beside the capture."""
    count = 0

    def copy() -> Path:
        nonlocal count
        count += 1
        run = tmp_path / f"run-{count}"
        run.mkdir()
        for path in capture:
            shutil.copy(path, run / path.name)
        return run

    return copy


def steps(run) -> int:
    return AnalysisResult.model_validate_json(run.result).summary.step_time.count


def test_a_warm_worker_serves_analyses_in_turn_and_is_replaced_after_max_jobs(run_dir):
    pool = WarmWorkers(max_jobs=2, recycle_bytes=2**40)
    try:
        pool.warm()
        first, second, third = (pool.run(run_dir(), 120, None) for _ in range(3))
        assert all(steps(r) > 3 for r in (first, second, third))
        assert first.pid == second.pid  # the warm one, twice
        assert third.pid != second.pid  # retired after two; its successor was warmed
        assert pool.started == 2
    finally:
        pool.close()


def test_a_worker_holding_more_than_recycle_bytes_is_replaced(run_dir):
    pool = WarmWorkers(recycle_bytes=32 * 2**20)  # XProf alone holds more
    try:
        first, second = pool.run(run_dir(), 120, None), pool.run(run_dir(), 120, None)
        assert steps(first) > 3 and steps(second) > 3
        assert first.pid != second.pid
    finally:
        pool.close()


def test_past_its_memory_limit_or_timeout_a_worker_is_killed_and_the_next_starts_afresh(run_dir):
    pool = WarmWorkers()
    try:
        over = pool.run(run_dir(), 120, max_rss_bytes=16 * 2**20)
        assert over.ending is Ending.OVER_MEMORY and over.result is None
        assert not psutil.pid_exists(over.pid) or psutil.Process(over.pid).status() == "zombie"
        assert pool.run(run_dir(), 0.05, None).ending is Ending.TIMED_OUT  # killed at its deadline
        after = pool.run(run_dir(), 120, None)
        assert steps(after) > 3 and after.pid != over.pid
    finally:
        pool.close()


def test_a_capture_xprof_cannot_read_fails_with_its_reason_and_retires_it(run_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "host.xplane.pb").write_bytes(b"\x0a\xff\xff\xff\xff\x0fnot a protobuf")
    analyzer = XprofAnalyzer(timeout_s=120)
    try:
        with pytest.raises(AnalysisFailed) as failed:
            analyzer.analyze(bad)
        assert failed.value.code == "analysis_failed"
        assert "XProf could not analyse" in failed.value.detail
        good = analyzer.analyze(run_dir())
        assert good.summary.step_time.count > 3
        assert analyzer.workers.started == 2
    finally:
        analyzer.close()


def test_an_idle_worker_leaves_by_itself_and_the_next_analysis_starts_one(run_dir):
    pool = WarmWorkers(idle_s=0.5)
    try:
        pool.warm()
        (idle,) = pool._idle
        idle.proc.wait(30)  # XProf's import, then half a second without work
        assert idle.proc.returncode == 0
        run = pool.run(run_dir(), 120, None)
        assert steps(run) > 3 and run.pid != idle.proc.pid
    finally:
        pool.close()


def test_a_worker_warmed_from_a_thread_that_ended_lives_on_and_dies_with_the_service(tmp_path):
    """Linux's parent-death signal follows the thread that started a child, not the process."""
    script = textwrap.dedent(
        """
        import threading, time
        from profiler_service.analysis.warm_workers import WarmWorkers
        pool = WarmWorkers()
        thread = threading.Thread(target=pool.warm)
        thread.start(); thread.join()
        print(pool._idle[0].proc.pid, flush=True)
        time.sleep(600)
        """
    )
    service = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker = psutil.Process(int(service.stdout.readline()))
        time.sleep(1.0)
        assert worker.is_running() and worker.status() != "zombie"
        assert worker.nice() >= 10  # below the training job and the service
    finally:
        service.kill()
        service.wait()
    worker.wait(10)  # gone with the service (a zombie reaped by init, or never one)
    assert not psutil.pid_exists(worker.pid) or worker.status() == "zombie"
