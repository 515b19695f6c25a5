"""Analysis worker process: reads one run directory, prints the analysis as JSON.

A separate, lower-priority process keeps XProf's memory and CPU off the service (and, with the
in-process agent, off the training process), and lets a runaway conversion be killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from profiler_service.child_process import die_with_parent, lower_priority, report

RESULT_MARKER = "PROFILER_SERVICE_ANALYSIS "


def main() -> None:
    run_dir, parent_pid = Path(sys.argv[1]), int(sys.argv[2])
    die_with_parent(parent_pid)
    lower_priority()
    from profiler_service.analysis.summary import analyse_run

    result = analyse_run(run_dir)
    report(RESULT_MARKER, result.model_dump_json())


if __name__ == "__main__":
    main()
