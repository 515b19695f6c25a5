"""Runs the analysis worker for a run directory, bounded by a timeout."""

from __future__ import annotations

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
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s

    def analyze(self, run_dir: Path) -> AnalysisResult:
        run = run_worker(WORKER, [str(run_dir)], RESULT_MARKER, self.timeout_s)
        if run is None:
            raise AnalysisFailed(
                "analysis_timeout", f"XProf's analysis did not finish within {self.timeout_s:g} s"
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
