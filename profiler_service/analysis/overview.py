"""Read the step-time statistics and XProf's own verdict from the overview page."""

from __future__ import annotations

from profiler_service.analysis.xprof_tools import as_float, table_with
from profiler_service.models import Summary


def summarise_overview(tables: list[dict], summary: Summary) -> None:
    steps = table_with(tables, "steptime_ms_average")
    if steps is not None:
        p = steps["p"]
        summary.step_count = len(steps.get("rows", []))
        summary.step_time_ms_avg = as_float(p.get("steptime_ms_average"))
        summary.step_time_ms_min = as_float(p.get("steptime_ms_minimum"))
        summary.step_time_ms_max = as_float(p.get("steptime_ms_maximum"))
        summary.step_time_ms_stddev = as_float(p.get("steptime_ms_standard_deviation"))
        summary.input_conclusion = p.get("input_conclusion") or None
        summary.next_step_advice = p.get("summary_nextstep") or None
    verdict = table_with(tables, "bottleneck")
    if verdict is not None:
        summary.bottleneck = verdict["p"].get("bottleneck") or None
