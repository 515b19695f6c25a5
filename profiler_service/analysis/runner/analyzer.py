"""Runs the analysis of a run directory on a worker process, bounded by a timeout and memory."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from profiler_service.analysis.findings import evaluate
from profiler_service.analysis.models import ProcessCpu, ProcessMemory
from profiler_service.analysis.runner.warm_workers import WarmWorkers
from profiler_service.analysis.summary import AnalysisResult
from profiler_service.child_process import Ending
from profiler_service.errors import PipelineFailure, SnapshotErrorCode


class AnalysisFailed(PipelineFailure):
    """An analysis that did not finish; the capture is kept, to be analysed again."""

    keep_files = True


class XprofAnalyzer:
    def __init__(
        self,
        timeout_s: float,
        python: Path | None = None,
        max_memory_bytes: Callable[[], int | None] = lambda: None,
        workers: WarmWorkers | None = None,
    ):
        self.timeout_s = timeout_s
        self.python = python  # another environment's interpreter, with XProf
        self.max_memory_bytes = max_memory_bytes  # asked at each analysis: headroom changes
        self.workers = workers or WarmWorkers(str(python) if python else None)

    def warm(self) -> None:
        """Start a worker ahead of the next analysis, when one can run here at all."""
        if self._unavailable() is None:
            self.workers.warm()

    def close(self) -> None:
        self.workers.close()

    def _unavailable(self) -> str | None:
        if self.python is None and importlib.util.find_spec("xprof") is None:
            return (
                "XProf is not installed in this environment (the agent's install leaves it out "
                "so the job keeps its own pins); the capture is kept. Set PROFILER_ANALYSIS_PYTHON "
                "to the Python of an environment with this project's `analysis` extra "
                "(`pip install '.[analysis]'`), or analyse it elsewhere: "
                "`profiler-service analyze PATH` from a sidecar's environment"
            )
        if self.python is not None and not self.python.exists():
            return (
                f"PROFILER_ANALYSIS_PYTHON names {self.python}, which does not exist; the "
                "capture is kept"
            )
        return None

    def analyze(
        self,
        run_dir: Path,
        process_memory: ProcessMemory | None = None,
        process_cpu: ProcessCpu | None = None,
    ) -> AnalysisResult:
        """XProf's tools on the worker, then the rules here, once, with what the service read
        beside the capture (the job's memory and its limit, its cores, from the look-back
        sampler)."""
        unavailable = self._unavailable()
        if unavailable is not None:
            raise AnalysisFailed(SnapshotErrorCode.ANALYSIS_UNAVAILABLE, unavailable)
        limit = self.max_memory_bytes()
        run = self.workers.run(run_dir, self.timeout_s, limit)
        if run.ending is Ending.REPORTED and run.result is not None:
            summary = AnalysisResult.model_validate_json(run.result).summary
            summary.process_memory = process_memory
            summary.process_cpu = process_cpu
            return AnalysisResult(summary=summary, findings=evaluate(summary))
        if run.ending is Ending.TIMED_OUT:
            raise AnalysisFailed(
                SnapshotErrorCode.ANALYSIS_TIMEOUT,
                f"XProf's analysis did not finish within {self.timeout_s:g} s",
            )
        if run.ending is Ending.OVER_MEMORY:
            size = sum(p.stat().st_size for p in run_dir.glob("*.xplane.pb"))
            raise AnalysisFailed(
                SnapshotErrorCode.ANALYSIS_TOO_LARGE,
                f"the analysis of this {size / 2**20:,.1f} MB capture passed its memory limit of "
                f"{(limit or 0) / 2**20:,.0f} MB (PROFILER_ANALYSIS_MAX_MEMORY_BYTES) "
                "and was stopped; the capture is kept. Capture for a shorter time or at lower "
                "tracer levels, or raise the limit (and the container's memory with it)",
            )
        if run.oom_killed:
            raise AnalysisFailed(
                SnapshotErrorCode.ANALYSIS_TOO_LARGE,
                "the analysis worker was killed (SIGKILL), most likely by the kernel's OOM killer: "
                "the capture needs more memory than the container has; the capture is kept. "
                "Lower PROFILER_ANALYSIS_MAX_MEMORY_BYTES below the container's limit",
            )
        reason = _last_error_line(run.stderr) or run.how_it_ended()
        raise AnalysisFailed(
            SnapshotErrorCode.ANALYSIS_FAILED,
            f"XProf could not analyse the capture (corrupt or truncated?): {reason}",
        )


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "failed" in line:
            return line[:500]
    return lines[-1][:500] if lines else ""
