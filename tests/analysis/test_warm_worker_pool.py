"""The warm-worker pool's life, without XProf or TensorFlow: each worker runs a trivial job
(tests/fakes.py `trivial_job`), so what is tested is the pool alone: reuse, retirement, limits,
idle exit, closing. Processes are told apart by the pids the pool reports with each run.
(XProf's own behaviour in a worker: test_warm_workers.py, on a real capture.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from profiler_service.analysis.runner.warm_workers import WarmWorkers
from profiler_service.child_process import Ending

TESTS = Path(__file__).parents[1]
JOB = "fakes:trivial_job"


@pytest.fixture(autouse=True)
def importable_fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers import the job from tests/fakes.py."""
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), path])))


@pytest.fixture
def pool() -> Iterator[Callable[..., WarmWorkers]]:
    made: list[WarmWorkers] = []

    def make(**kwargs) -> WarmWorkers:
        made.append(WarmWorkers(job=JOB, **kwargs))
        return made[-1]

    yield make
    for p in made:
        p.close()


def run(pool: WarmWorkers, name: str, timeout_s: float = 60, max_rss_bytes: int | None = None):
    return pool.run(Path("/nonexistent") / name, timeout_s, max_rss_bytes)


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_a_warm_worker_serves_jobs_in_turn_and_is_replaced_after_max_jobs(pool):
    workers = pool(max_jobs=2)
    workers.warm()
    first, second, third = (run(workers, f"run-{i}") for i in range(3))
    assert [r.result for r in (first, second, third)] == ["run-0", "run-1", "run-2"]
    assert first.pid == second.pid  # the warm one, twice
    assert third.pid != second.pid  # retired after two; its successor was warmed
    assert workers.started == 2


def test_a_worker_holding_more_than_recycle_bytes_is_replaced(pool):
    workers = pool(recycle_bytes=64 * 2**20)
    held = run(workers, "hold-1")
    assert held.ending is Ending.REPORTED
    assert run(workers, "run").pid != held.pid
    assert gone(held.pid)


def test_a_failed_job_retires_its_worker_and_says_why(pool):
    workers = pool()
    failed = run(workers, "fail-1")
    assert failed.ending is Ending.FAILED and "cannot read fail-1" in (failed.stderr or "")
    after = run(workers, "run")
    assert after.result == "run" and after.pid != failed.pid


def test_past_its_memory_limit_or_timeout_a_worker_is_killed(pool):
    workers = pool()
    over = run(workers, "hold-2", max_rss_bytes=64 * 2**20)
    assert over.ending is Ending.OVER_MEMORY and over.result is None and gone(over.pid)
    late = run(workers, "hang-1", timeout_s=0.5)
    assert late.ending is Ending.TIMED_OUT and gone(late.pid)
    assert run(workers, "run").result == "run"


def test_an_idle_worker_leaves_by_itself_and_the_next_job_starts_one(pool):
    workers = pool(idle_s=0.2)
    workers.warm()
    (idle,) = workers._idle
    idle.proc.wait(30)  # its job prepared, then a fifth of a second without work
    assert idle.proc.returncode == 0
    after = run(workers, "run")
    assert after.result == "run" and after.pid != idle.proc.pid


def test_closing_stops_the_idle_worker_and_nothing_is_warmed_after(pool):
    workers = pool()
    workers.warm()
    (idle,) = workers._idle
    workers.close()
    idle.proc.wait(10)
    workers.warm()
    assert workers._idle == [] and workers.started == 1


def test_a_worker_started_while_the_pool_closes_is_not_kept(pool, monkeypatch):
    """close() between a worker's start and its joining the idle list: it is stopped."""
    workers = pool()
    start, started = workers._start, []

    def start_then_close():
        started.append(start())
        workers.close()
        return started[-1]

    monkeypatch.setattr(workers, "_start", start_then_close)
    workers.warm()
    assert workers._idle == [] and len(started) == 1
    assert started[0].proc.wait(10) is not None


def test_a_worker_warmed_from_a_thread_that_ended_lives_on_and_dies_with_the_service():
    """Linux's parent-death signal follows the thread that started a child, not the process.

    The thread ends once the worker has asked for that signal (it lowers its priority next);
    once the thread is gone from /proc, any such signal was sent: the worker then answering a
    job shows it did not get one, with no sleep for a kill that may come."""
    script = textwrap.dedent(
        f"""
        import threading, time
        from pathlib import Path
        import psutil
        from profiler_service.analysis.runner.warm_workers import WarmWorkers

        def until(done, what):
            deadline = time.monotonic() + 30
            while not done():
                assert time.monotonic() < deadline, what
                time.sleep(0.01)

        pool = WarmWorkers(job={JOB!r})

        def warm():
            pool.warm()
            worker = psutil.Process(pool._idle[0].proc.pid)
            until(lambda: worker.nice() >= 10, "the worker's die-with-parent, then its nice")

        thread = threading.Thread(target=warm)
        thread.start(); thread.join()
        until(lambda: not Path(f"/proc/self/task/{{thread.native_id}}").exists(), "its exit")
        worker = pool._idle[0].proc.pid
        answer = pool.run(Path("/nonexistent/alive"), 60, None)
        print(worker, answer.pid, answer.result, flush=True)
        time.sleep(600)  # the service lives on until the test kills it: not a wait
        """
    )
    service = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = service.stdout.readline()
        assert line, "the service's script failed (its stderr is above)"
        worker_pid, ran_on, result = line.split()
        worker = psutil.Process(int(worker_pid))
        assert (int(ran_on), result) == (worker.pid, "alive")  # the warmed worker, alive
        assert worker.is_running() and worker.status() != "zombie"
        assert worker.nice() >= 10  # below the training job and the service
    finally:
        service.kill()
        service.wait()
    worker.wait(10)  # gone with the service (a zombie reaped by init, or never one)
    assert gone(worker.pid)
