"""Runs the analysis worker for a run directory, bounded by a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from profiler_service.analysis.summary import AnalysisResult
from profiler_service.analysis.worker import RESULT_MARKER


class AnalysisFailed(Exception):
    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code = code
        self.detail = detail


class XprofAnalyzer:
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s

    def analyze(self, run_dir: Path) -> AnalysisResult:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "profiler_service.analysis.worker",
                str(run_dir),
                str(os.getpid()),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AnalysisFailed(
                "analysis_timeout", f"XProf's analysis did not finish within {self.timeout_s:g} s"
            ) from None
        for line in reversed(stdout.splitlines()):
            if line.startswith(RESULT_MARKER):
                return AnalysisResult.model_validate_json(line[len(RESULT_MARKER) :])
        reason = _last_error_line(stderr) or f"exit status {proc.returncode}"
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
