"""The warm analysis workers running XProf, on a real capture of a real Keras job: what XProf
itself holds, and its failures. The pool's own life (reuse, retirement, idle exit, closing,
parent death) is tested without XProf in test_warm_worker_pool.py.

Processes are told apart by their pids, which the pool reports with each run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import psutil
import pytest
from helpers import capture_once

from profiler_service.analysis.runner.analyzer import AnalysisFailed, XprofAnalyzer
from profiler_service.analysis.runner.warm_workers import WarmWorkers
from profiler_service.analysis.summary import AnalysisResult
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
