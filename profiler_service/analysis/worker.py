"""Analysis worker process: reads run directories named on stdin, prints each analysis as JSON.

A separate, lower-priority process keeps XProf's memory and CPU off the service (and, with the
in-process agent, off the training process), and lets a runaway conversion be killed. It imports
XProf before it says READY, so a worker started ahead of time (warm_workers.py) spends none of a
capture's time-to-findings on start-up. It serves one analysis at a time and exits when its
stdin closes, when it has waited `idle_s` for work, or when its parent dies.
"""

from __future__ import annotations

import select
import sys
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


def main() -> None:
    parent_pid, idle_s = int(sys.argv[1]), float(sys.argv[2])
    die_with_parent(parent_pid)
    lower_priority()
    from profiler_service.analysis.summary import AnalysisResult, summarise_run
    from profiler_service.analysis.xprof_tools import load_xprof

    load_xprof()
    report(READY, "")
    while select.select([sys.stdin], [], [], idle_s)[0]:
        line = sys.stdin.readline()
        if not line:
            return  # the service closed our stdin: it is done with us
        try:
            # The rules run in the service, once, with what it knows beside the capture.
            result = AnalysisResult(summary=summarise_run(Path(line.strip())))
        except Exception as exc:  # reported, and the service retires this worker
            report(ERROR_MARKER, f"{type(exc).__name__}: {exc}".replace("\n", " ")[:2000])
            continue
        report(RESULT_MARKER, result.model_dump_json())
        return_freed_memory()


if __name__ == "__main__":
    main()
