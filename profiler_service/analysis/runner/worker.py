"""Analysis worker process: reads run directories named on stdin, prints each analysis as JSON.

A separate, lower-priority process keeps XProf's memory and CPU off the service (and, with the
in-process agent, off the training process), and lets a runaway conversion be killed. It imports
XProf before it says READY, so a worker started ahead of time (warm_workers.py) spends none of a
capture's time-to-findings on start-up. It serves one analysis at a time and exits when its
stdin closes, when it has waited `idle_s` for work, or when its parent dies.
"""

from __future__ import annotations

import importlib
import select
import sys
from collections.abc import Callable
from pathlib import Path

from profiler_service.child_process import (
    die_with_parent,
    lower_priority,
    report,
    return_freed_memory,
)

READY = "PROFILER_SERVICE_ANALYSIS_READY"
RESULT_MARKER = "PROFILER_SERVICE_ANALYSIS "
ERROR_MARKER = "PROFILER_SERVICE_ANALYSIS_ERROR "


# The job a worker runs unless told otherwise: `module:function`, a function that prepares (here:
# imports XProf) and returns the job, `run directory -> the text reported`.
ANALYSIS_JOB = "profiler_service.analysis.runner.worker:analysis_job"
Job = Callable[[Path], str]


def analysis_job() -> Job:
    """XProf imported now; then each run directory's summary as JSON (the rules run in the
    service, once, with what it knows beside the capture)."""
    from profiler_service.analysis.readers.xprof_tools import load_xprof
    from profiler_service.analysis.summary import AnalysisResult, summarise_run

    load_xprof()
    return lambda run_dir: AnalysisResult(summary=summarise_run(run_dir)).model_dump_json()


def serve(job: Job, idle_s: float) -> None:
    """Say READY, then run `job` on each run directory read from stdin, one at a time."""
    report(READY, "")
    while select.select([sys.stdin], [], [], idle_s)[0]:
        line = sys.stdin.readline()
        if not line:
            return  # the service closed our stdin: it is done with us
        try:
            result = job(Path(line.strip()))
        except Exception as exc:  # reported, and the service retires this worker
            report(ERROR_MARKER, f"{type(exc).__name__}: {exc}".replace("\n", " ")[:2000])
            continue
        report(RESULT_MARKER, result)
        return_freed_memory()


def main() -> None:
    parent_pid, idle_s = int(sys.argv[1]), float(sys.argv[2])
    spec = sys.argv[3] if len(sys.argv) > 3 else ANALYSIS_JOB
    die_with_parent(parent_pid)
    lower_priority()
    module, _, factory = spec.partition(":")
    serve(getattr(importlib.import_module(module), factory)(), idle_s)


if __name__ == "__main__":
    main()
