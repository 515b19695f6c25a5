"""From a run directory of `.xplane.pb` files to a Summary and findings, using XProf's tools.

Never builds the trace viewer's JSON (a 30 MB capture yields ~170 MB of it in ~14 s); the
trace stays available on demand in XProf/TensorBoard.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf.message import DecodeError
from pydantic import BaseModel, Field

from profiler_service.analysis.gpu_activity import read_gpu_activity
from profiler_service.analysis.host_readers import summarise_host_events
from profiler_service.analysis.input_pipeline import summarise_input_pipeline
from profiler_service.analysis.kept_memory import has_memory_events, kept_allocations_in_capture
from profiler_service.analysis.kernels import summarise_kernels
from profiler_service.analysis.memory import may_be_growing, summarise_memory
from profiler_service.analysis.models import Finding, HostSummary, Summary
from profiler_service.analysis.op_stats import host_communication_ms, read_ops, summarise_op_stats
from profiler_service.analysis.overview import read_step_time, summarise_overview
from profiler_service.analysis.rules import evaluate
from profiler_service.analysis.step_markers import per_training_step, unhide_markers_in_loops
from profiler_service.analysis.xprof_tools import ToolFailed, tool_data, tool_names
from profiler_service.child_process import return_freed_memory
from profiler_service.errors import Failed

T = TypeVar("T")


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
    summary.notes.extend(unhide_markers_in_loops(paths))  # before any XProf tool reads them
    # XProf's converters release the GIL. The memory profile and the tool list each parse the
    # capture again, so they run beside the overview instead of after it, unless the capture is
    # large enough for their peaks to add up to too much; the memory profile only where there are
    # allocator events to read.
    side_by_side = sum(p.stat().st_size for p in paths) <= SIDE_BY_SIDE_MAX_BYTES
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="xprof") as pool:
        names = pool.submit(tool_names, paths)
        memory = pool.submit(_memory_profiles, paths) if side_by_side else None
        gpu = pool.submit(_read_or_note, lambda: read_gpu_activity(paths))
        overview = tool_data(paths, "overview_page")  # required: a failure fails the analysis
        summary.tools = names.result()
        # These reuse the op stats the overview cached beside the capture: read side by side.
        fetched = {
            tool: pool.submit(_read_or_note, lambda t=tool: tool_data(paths, t))
            for tool, _ in _OPTIONAL_TOOLS
            if tool in summary.tools or tool == "kernel_stats"  # kernel_stats is not listed on CPU
        }
        if memory is None:
            return_freed_memory()  # the overview's peak, before the memory profile's
            memory_profiles = _memory_profiles(paths)
        else:
            memory_profiles = memory.result()
    summarise_overview(overview, summary)
    gpus = gpu.result()
    if isinstance(gpus, Failed):
        summary.notes.append(f"GPU planes: {gpus.reason}")
    else:
        summary.gpu = gpus
    summary.notes.extend(per_training_step(summary.step_time, paths))
    for tool, read in _OPTIONAL_TOOLS:
        if tool in fetched:
            _optional(summary, tool, fetched[tool].result(), read)
    allocators = {}
    for path, profile in zip(paths, memory_profiles, strict=True):
        if profile is None:
            continue
        if isinstance(profile, Failed):
            summary.notes.append(f"memory_profile: {profile.reason}")
            continue
        before = len(summary.memory)
        summarise_memory(profile, summary)
        allocators[path] = summary.memory[before:]
        for allocator in summary.memory[before:]:
            if may_be_growing(allocator):
                try:
                    allocator.kept_allocations = kept_allocations_in_capture(
                        path, allocator.allocator
                    )
                except (OSError, ValueError, DecodeError) as exc:
                    summary.notes.append(f"memory events of {path.name}: {exc}")
    summarise_host_events(paths, summary, allocators)
    if len(paths) > 1:
        summary.per_host = [_host_summary(path) for path in paths]
    return summary


# Above this much `.xplane.pb`, the memory profile waits for the overview: XProf's overview holds
# about 50x the file at its peak and the memory profile about 25x (a 15 MB capture: 735 MB and
# 350 MB), and side by side those add up.
SIDE_BY_SIDE_MAX_BYTES = 8 * 2**20


def _memory_profiles(paths: list[Path]) -> list[Any]:
    """XProf's memory profile of each host (it reads one at a time), None where it has no
    allocator events, Failed where it could not be read."""
    return [
        _read_or_note(lambda p=p: tool_data([p], "memory_profile"))
        if has_memory_events(p)
        else None
        for p in paths
    ]


def _read_or_note(read: Callable[[], T]) -> T | Failed:
    """What `read` returns, or why it could not: a note in the summary, not a failed analysis."""
    try:
        return read()
    except (ToolFailed, ValueError, DecodeError) as exc:
        return Failed(str(exc))


_OPTIONAL_TOOLS: tuple[tuple[str, Callable[[Any, Summary], None]], ...] = (
    ("framework_op_stats", summarise_op_stats),
    ("input_pipeline_analyzer", summarise_input_pipeline),
    ("kernel_stats", summarise_kernels),
)


def _optional(
    summary: Summary, tool: str, data: Any | Failed, read: Callable[[Any, Summary], None]
) -> None:
    """A tool whose failure is a note, not a failed analysis."""
    if isinstance(data, Failed):
        summary.notes.append(f"{tool}: {data.reason}")
        return
    try:
        read(data, summary)
    except (ValueError, KeyError, TypeError) as exc:
        summary.notes.append(f"{tool}: {exc}")


def _host_summary(path: Path) -> HostSummary:
    """One host on its own, read through a directory of its own.

    XProf caches op stats beside the files it reads, under one name whatever the hosts. Read
    in the run directory, one host's stats would replace the run's all-hosts cache, which
    XProf's UI serves later; alone, both tools here share one conversion of this host.
    """
    with tempfile.TemporaryDirectory(prefix="xprof-host-") as alone:
        link = Path(alone) / path.name
        link.symlink_to(path.resolve())
        step_time, _ = read_step_time(tool_data([link], "overview_page"))
        per_training_step(step_time, [link])
        ops = read_ops(tool_data([link], "framework_op_stats")) if step_time.avg_ms else []
    parts = step_time.breakdown_avg
    input_share = busy = None
    host_collectives = 0.0
    if step_time.avg_ms:
        input_share = round(100 * parts.input_ms / step_time.avg_ms, 1)
        host_collectives = round(host_communication_ms(ops) / max(step_time.count, 1), 3)
        waiting = parts.other_ms + parts.collectives_ms + host_collectives
        busy = round(max(0.0, step_time.avg_ms - waiting), 3)
    return HostSummary(
        host=path.name.removesuffix(".xplane.pb"),
        step_count=step_time.count,
        step_time_ms_avg=step_time.avg_ms,
        input_share_pct=input_share,
        breakdown_avg=parts,
        host_collectives_ms_avg=host_collectives,
        busy_ms_avg=busy,
    )
