"""Runs the analysis worker for a run directory, bounded by a timeout."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from profiler_service.analysis.summary import AnalysisResult
from profiler_service.analysis.worker import RESULT_MARKER
from profiler_service.child_process import run_worker

WORKER = "profiler_service.analysis.worker"


class AnalysisFailed(Exception):
    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code = code
        self.detail = detail


class XprofAnalyzer:
    def __init__(
        self,
        timeout_s: float,
        python: Path | None = None,
        max_memory_bytes: Callable[[], int | None] = lambda: None,
    ):
        self.timeout_s = timeout_s
        self.python = python  # another environment's interpreter, with XProf
        self.max_memory_bytes = max_memory_bytes  # asked at each analysis: headroom changes

    def analyze(self, run_dir: Path) -> AnalysisResult:
        if self.python is None and importlib.util.find_spec("xprof") is None:
            raise AnalysisFailed(
                "analysis_unavailable",
                "XProf is not installed in this environment (the agent's install leaves it out "
                "so the job keeps its own pins); the capture is kept. Set PROFILER_ANALYSIS_PYTHON "
                "to the Python of an environment with `profiler-service[analysis]`, or analyse it "
                "elsewhere: `profiler-service analyze PATH` from a sidecar's environment",
            )
        if self.python is not None and not self.python.exists():
            raise AnalysisFailed(
                "analysis_unavailable",
                f"PROFILER_ANALYSIS_PYTHON names {self.python}, which does not exist; the "
                "capture is kept",
            )
        limit = self.max_memory_bytes()
        run = run_worker(
            WORKER,
            [str(run_dir)],
            RESULT_MARKER,
            self.timeout_s,
            str(self.python) if self.python else None,
            limit,
        )
        if run is None:
            raise AnalysisFailed(
                "analysis_timeout", f"XProf's analysis did not finish within {self.timeout_s:g} s"
            )
        if run.over_memory:
            size = sum(p.stat().st_size for p in run_dir.glob("*.xplane.pb"))
            raise AnalysisFailed(
                "analysis_too_large",
                f"the analysis of this {size / 2**20:,.1f} MB capture passed its memory limit of "
                f"{(limit or 0) / 2**20:,.0f} MB (PROFILER_ANALYSIS_MAX_MEMORY_BYTES) "
                "and was stopped; the capture is kept. Capture for a shorter time or at lower "
                "tracer levels, or raise the limit (and the container's memory with it)",
            )
        if run.returncode == -9 and run.result is None:
            raise AnalysisFailed(
                "analysis_too_large",
                "the analysis worker was killed (SIGKILL), most likely by the kernel's OOM killer: "
                "the capture needs more memory than the container has; the capture is kept. "
                "Lower PROFILER_ANALYSIS_MAX_MEMORY_BYTES below the container's limit",
            )
        if run.result is not None:
            return AnalysisResult.model_validate_json(run.result)
        reason = _last_error_line(run.stderr) or f"exit status {run.returncode}"
        raise AnalysisFailed(
            "analysis_failed",
            f"XProf could not analyse the capture (corrupt or truncated?): {reason}",
        )


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "failed" in line:
            return line[:500]
    return lines[-1][:500] if lines else ""
