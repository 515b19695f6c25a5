"""Analysis worker processes started before they are needed, so a capture never waits for one.

Each worker is the isolated, lower-priority process of worker.py: killed past its timeout or its
memory limit, gone when the service dies. One stays warm between analyses (XProf imported) and
is retired after `max_jobs` analyses, once its resident memory passes `recycle_bytes` (a long
life should not mean a growing one), after any failure, or by itself after `idle_s` without work.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from profiler_service.analysis.runner.worker import ANALYSIS_JOB, ERROR_MARKER, RESULT_MARKER
from profiler_service.child_process import POLL_S, Ending, WorkerRun, rss_bytes

WORKER = "profiler_service.analysis.runner.worker"
_EOF = None


class _Worker:
    """One worker process, its stdout read line by line on a thread of its own."""

    def __init__(self, python: str, idle_s: float, job: str):
        self.proc = subprocess.Popen(
            [python, "-m", WORKER, str(os.getpid()), repr(idle_s), job],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.jobs = 0
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=400)  # XProf's C++ log explains some failures
        self.stderr_lines = 0
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self.stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.stderr_reader.start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout or ():
            self.lines.put(line.rstrip("\n"))
        self.lines.put(_EOF)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr or ():
            self._stderr.append(line.rstrip("\n"))
            self.stderr_lines += 1

    def stderr_since(self, count: int) -> str:
        lines = list(self._stderr)
        return "\n".join(lines[len(lines) - min(self.stderr_lines - count, len(lines)) :])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


class WarmWorkers:
    """Runs analyses on warm workers; starts a cold one only when none is idle."""

    def __init__(
        self,
        python: str | None = None,
        *,
        max_jobs: int = 20,
        recycle_bytes: int = 768 * 2**20,
        idle_s: float = 900.0,
        job: str = ANALYSIS_JOB,
    ):
        """`job`: what each worker runs, `module:factory` (worker.py); a test gives a trivial
        one, so the pool's life is tested without XProf or TensorFlow."""
        self.python = python or sys.executable
        self.job = job
        self.max_jobs = max_jobs
        self.recycle_bytes = recycle_bytes
        self.idle_s = idle_s
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        # Linux's parent-death signal follows the *thread* that started a child: workers are all
        # started from this one long-lived thread, so a finished request thread takes none along.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="analysis-spawn")
        self.started = 0  # workers started, for tests and benchmarks
        self._closed = False

    def warm(self) -> None:
        """Have one worker idle and importing XProf: called at start-up (never as a capture
        begins: importing XProf beside the traced job slows its steps)."""
        with self._lock:
            self._idle = [w for w in self._idle if w.alive()]
            if self._idle or self.idle_s <= 0 or self._closed:
                return
        worker = self._start()
        with self._lock:
            if not self._closed:
                self._idle.append(worker)
                return
        worker.stop()  # closed while it started: never kept

    def run(self, run_dir: Path, timeout_s: float, max_rss_bytes: int | None) -> WorkerRun:
        """The analysis of `run_dir`, or how it ended without one (past `timeout_s` or
        `max_rss_bytes` its worker is killed)."""
        deadline = time.monotonic() + timeout_s
        worker = self._take() or self._start()
        run = self._run_on(worker, run_dir, deadline, max_rss_bytes)
        if run.ending is Ending.EXITED and run.exit_code == 0:
            # it left on its own (idle_s ran out) just as it was given the job: once more, afresh
            run = self._run_on(self._start(), run_dir, deadline, max_rss_bytes)
        return run

    def _run_on(
        self, worker: _Worker, run_dir: Path, deadline: float, max_rss_bytes: int | None
    ) -> WorkerRun:
        worker.jobs += 1
        first_stderr = worker.stderr_lines
        with contextlib.suppress(OSError):  # when it has died, its exit status is read below
            assert worker.proc.stdin is not None
            worker.proc.stdin.write(f"{run_dir}\n")
            worker.proc.stdin.flush()
        peak, pid = 0, worker.proc.pid
        while True:
            try:
                line = worker.lines.get(timeout=POLL_S)
            except queue.Empty:
                line = ""
            if line is _EOF:
                worker.proc.wait()
                worker.stderr_reader.join(1)  # its last words
                stderr = worker.stderr_since(first_stderr)
                return WorkerRun.exited(
                    worker.proc.returncode, stderr=stderr, peak_rss_bytes=peak, pid=pid
                )
            if line.startswith(RESULT_MARKER):
                self._give_back(worker)
                return WorkerRun(Ending.REPORTED, line[len(RESULT_MARKER) :], "", peak, pid)
            if line.startswith(ERROR_MARKER):
                worker.stop()
                return WorkerRun(Ending.FAILED, None, line[len(ERROR_MARKER) :], peak, pid)
            peak = max(peak, rss_bytes(pid))
            if max_rss_bytes is not None and peak > max_rss_bytes:
                worker.stop()
                return WorkerRun(Ending.OVER_MEMORY, peak_rss_bytes=peak, pid=pid)
            if time.monotonic() > deadline:
                worker.stop()
                return WorkerRun(Ending.TIMED_OUT, peak_rss_bytes=peak, pid=pid)

    def close(self) -> None:
        """Stop the idle workers; an analysis under way finishes, and its worker is not kept."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()
        self._spawner.shutdown(wait=False)

    def _start(self) -> _Worker:
        self.started += 1
        try:
            return self._spawner.submit(_Worker, self.python, self.idle_s, self.job).result()
        except RuntimeError:  # closed: an analysis that starts during shutdown gets its own
            return _Worker(self.python, self.idle_s, self.job)

    def _take(self) -> _Worker | None:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
        return None

    def _give_back(self, worker: _Worker) -> None:
        """Keep the worker for the next analysis, unless it is due for retirement."""
        retire = worker.jobs >= self.max_jobs or rss_bytes(worker.proc.pid) > self.recycle_bytes
        with self._lock:
            if not retire and not self._idle and not self._closed:
                self._idle.append(worker)
                return
        worker.stop()
        if retire:  # its successor imports XProf now, not when the next capture ends
            self.warm()
