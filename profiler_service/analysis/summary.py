"""From a run directory of `.xplane.pb` files to a Summary and findings, using XProf's tools.

Never builds the trace viewer's JSON (a 30 MB capture yields ~170 MB of it in ~14 s); the
trace stays available on demand in XProf/TensorBoard.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from profiler_service.analysis.input_pipeline import summarise_input_pipeline
from profiler_service.analysis.kernels import summarise_kernels
from profiler_service.analysis.memory import summarise_memory
from profiler_service.analysis.models import Finding, HostSummary, Summary
from profiler_service.analysis.op_stats import summarise_op_stats
from profiler_service.analysis.overview import read_step_time, summarise_overview
from profiler_service.analysis.rules import evaluate
from profiler_service.analysis.xprof_tools import ToolFailed, tool_data, tool_names


class AnalysisResult(BaseModel):
    summary: Summary
    findings: list[Finding] = Field(default_factory=list)


def xplane_paths(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("*.xplane.pb"))


def analyse_run(run_dir: Path) -> AnalysisResult:
    """Raises ToolFailed when XProf cannot read the capture at all."""
    summary = summarise_run(run_dir)
    return AnalysisResult(summary=summary, findings=evaluate(summary))


def summarise_run(run_dir: Path) -> Summary:
    paths = xplane_paths(run_dir)
    if not paths:
        raise ToolFailed(f"no .xplane.pb in {run_dir}")
    summary = Summary(hosts=[p.name.removesuffix(".xplane.pb") for p in paths])
    summary.tools = tool_names(paths)
    if "overview_page" not in summary.tools:
        raise ToolFailed(f"XProf found no overview page in {[p.name for p in paths]}")
    # The overview is required; the other tools add detail, and a failure there is a note.
    summarise_overview(tool_data(paths, "overview_page"), summary)
    _optional(
        summary,
        "framework_op_stats",
        lambda: summarise_op_stats(tool_data(paths, "framework_op_stats"), summary),
    )
    _optional(
        summary,
        "input_pipeline_analyzer",
        lambda: summarise_input_pipeline(tool_data(paths, "input_pipeline_analyzer"), summary),
    )
    _optional(
        summary,
        "kernel_stats",
        lambda: summarise_kernels(tool_data(paths, "kernel_stats"), summary),
    )
    for path in paths:  # XProf's memory profile reads one host at a time
        _optional(
            summary,
            "memory_profile",
            lambda p=path: summarise_memory(tool_data([p], "memory_profile"), summary),
        )
    if len(paths) > 1:
        summary.per_host = [_host_summary(path) for path in paths]
    return summary


def _optional(summary: Summary, tool: str, read: Callable[[], None]) -> None:
    if tool not in summary.tools and tool != "kernel_stats":
        return
    try:
        read()
    except (ToolFailed, ValueError, KeyError, TypeError) as exc:
        summary.notes.append(f"{tool}: {exc}")


def _host_summary(path: Path) -> HostSummary:
    step_time, _ = read_step_time(tool_data([path], "overview_page"))
    input_share = (
        round(100 * step_time.breakdown_avg.input_ms / step_time.avg_ms, 1)
        if step_time.avg_ms
        else None
    )
    return HostSummary(
        host=path.name.removesuffix(".xplane.pb"),
        step_count=step_time.count,
        step_time_ms_avg=step_time.avg_ms,
        input_share_pct=input_share,
    )
