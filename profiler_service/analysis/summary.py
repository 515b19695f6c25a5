"""From a run directory of `.xplane.pb` files to a Summary, using XProf's tools."""

from __future__ import annotations

from pathlib import Path

from profiler_service.analysis.overview import summarise_overview
from profiler_service.analysis.xprof_tools import tool_data, tool_names
from profiler_service.models import Summary


def summarise_run(run_dir: Path) -> Summary:
    """Raises ToolFailed when XProf cannot read the capture."""
    paths = sorted(run_dir.glob("*.xplane.pb"))
    summary = Summary(hosts=[p.name.removesuffix(".xplane.pb") for p in paths])
    summary.tools = tool_names(paths)
    if "overview_page" in summary.tools:
        summarise_overview(tool_data(paths, "overview_page"), summary)
    return summary
