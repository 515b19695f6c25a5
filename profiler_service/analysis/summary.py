"""From a run directory of `.xplane.pb` files to a Summary and findings, using XProf's tools.

Never builds the trace viewer's JSON (a 30 MB capture yields ~170 MB of it in ~14 s); the
trace stays available on demand in XProf/TensorBoard.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf.message import DecodeError
from pydantic import BaseModel, Field

from profiler_service.analysis.findings import evaluate
from profiler_service.analysis.models import Finding, GpuActivity, HostSummary, StepTime, Summary
from profiler_service.analysis.parts import Parts, assemble
from profiler_service.analysis.readers import memory_events
from profiler_service.analysis.readers.eager_dispatch import read_eager_dispatch
from profiler_service.analysis.readers.framework import read_framework
from profiler_service.analysis.readers.gpu_activity import has_gpu_planes, read_gpu_activity
from profiler_service.analysis.readers.host_events import HostEvents, read_host_events
from profiler_service.analysis.readers.host_readers import add_allocations, costliest_tf_functions
from profiler_service.analysis.readers.input_pipeline import read_input_pipeline
from profiler_service.analysis.readers.kept_memory import has_memory_events
from profiler_service.analysis.readers.kernels import read_kernels
from profiler_service.analysis.readers.memory import read_memory
from profiler_service.analysis.readers.op_stats import (
    host_communication_ms,
    read_op_stats,
    read_ops,
)
from profiler_service.analysis.readers.overview import read_overview, read_step_time
from profiler_service.analysis.readers.python_stacks import read_python_stacks
from profiler_service.analysis.readers.step_markers import (
    add_time_between_markers,
    capture_span_ms,
    per_training_step,
    read_examples_per_step,
    unhide_markers_in_loops,
)
from profiler_service.analysis.readers.xplane import CaptureFile
from profiler_service.analysis.readers.xprof_tools import ToolFailed, tool_data, tool_names
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
    parts = Parts(hosts=[p.name.removesuffix(".xplane.pb") for p in paths])
    parts.notes.extend(unhide_markers_in_loops(paths))  # before any XProf tool reads them
    captures = [CaptureFile(p) for p in paths]  # each parsed once, by whichever reader is first
    # XProf's converters release the GIL. The memory profile, the tool list and our own reading
    # of the capture's events each parse the capture again, so they run beside the overview
    # instead of after it, unless the capture is large enough for the memory profile's peak to
    # add up with the overview's; the memory profile only where there are allocator events.
    side_by_side = sum(p.stat().st_size for p in paths) <= SIDE_BY_SIDE_MAX_BYTES
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="xprof") as pool:
        names = pool.submit(tool_names, paths)
        memory = pool.submit(_memory_profiles, paths) if side_by_side else None
        own = pool.submit(_own_events, captures)
        overview = tool_data(paths, "overview_page")  # required: a failure fails the analysis
        parts.tools = names.result()
        # These reuse the op stats the overview cached beside the capture: read side by side.
        fetched = {
            tool: pool.submit(_read_or_note, lambda t=tool: tool_data(paths, t))
            for tool in _OPTIONAL_TOOLS
            if tool in parts.tools or tool == "kernel_stats"  # kernel_stats is not listed on CPU
        }
        if memory is None:
            return_freed_memory()  # the overview's peak, before the memory profile's
            memory_profiles = _memory_profiles(paths)
        else:
            memory_profiles = memory.result()
        events = own.result()
    parts.overview = read_overview(overview)
    first = events.by_host.get(captures[0].host)
    parts.notes.extend(_per_training_step(parts.overview.step_time, captures[0], first))
    parts.gpu = events.gpu
    parts.framework = events.framework
    parts.notes.extend(events.notes)
    for tool, read in _OPTIONAL_TOOLS.items():
        if tool in fetched:
            _optional(parts, tool, fetched[tool].result(), read)
    unrecorded = [c.host for c, p in zip(captures, memory_profiles, strict=True) if p is None]
    if unrecorded:
        on_gpu = events.gpu is not None
        parts.memory_unrecorded = memory_events.unrecorded(unrecorded, on_gpu=on_gpu)
    for capture, profile in zip(captures, memory_profiles, strict=True):
        if profile is None:
            continue
        if isinstance(profile, Failed):
            parts.notes.append(f"memory_profile: {profile.reason}")
            continue
        allocators = read_memory(profile)
        if capture.host in events.by_host:  # else its host events said why they are missing
            add_allocations(allocators, events.by_host[capture.host])
        parts.memory.extend(allocators)
    parts.iterator_stats = [e.iterators for e in events.by_host.values()]
    parts.tf_functions = costliest_tf_functions(events.by_host)
    if first is not None:
        parts.eager = read_eager_dispatch(first)
    if len(captures) > 1:
        parts.per_host = [_host_summary(c, events.by_host.get(c.host)) for c in captures]
    parts.python_stacks = read_python_stacks(run_dir)
    return assemble(parts)


@dataclass
class _OwnEvents:
    """What the analysis reads from the capture's own events, one pass over each host's."""

    by_host: dict[str, HostEvents] = field(default_factory=dict)
    gpu: GpuActivity | None = None
    framework: str | None = None
    notes: list[str] = field(default_factory=list)


def _own_events(captures: list[CaptureFile]) -> _OwnEvents:
    """Each host's events, with their activity where the host has GPUs, then the GPUs."""
    found = _OwnEvents()
    activity = {}
    for capture in captures:
        try:
            events = read_host_events(capture, activity=has_gpu_planes(capture))
        except (OSError, ValueError, DecodeError) as exc:
            found.notes.append(f"host events of {capture.path.name}: {exc}")
            continue
        found.by_host[capture.host] = events
        if events.activity is not None:
            activity[capture.path] = events.activity
    framework = _read_or_note(lambda: read_framework(captures[0].space()))
    if isinstance(framework, Failed):
        found.notes.append(f"framework: {framework.reason}")
    else:
        found.framework = framework.value
    gpu = _read_or_note(lambda: read_gpu_activity(captures, activity))
    if isinstance(gpu, Failed):
        found.notes.append(f"GPU planes: {gpu.reason}")
    else:
        found.gpu = gpu
    return found


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


# Each optional tool, and where its reader's part goes.
_OPTIONAL_TOOLS: dict[str, Callable[[Parts, Any], None]] = {
    "framework_op_stats": lambda parts, data: setattr(parts, "op_stats", read_op_stats(data)),
    "input_pipeline_analyzer": lambda parts, data: setattr(
        parts, "input_pipeline", read_input_pipeline(data)
    ),
    "kernel_stats": lambda parts, data: setattr(parts, "kernels", read_kernels(data)),
}


def _optional(
    parts: Parts, tool: str, data: Any | Failed, read: Callable[[Parts, Any], None]
) -> None:
    """A tool whose failure is a note, not a failed analysis."""
    if isinstance(data, Failed):
        parts.notes.append(f"{tool}: {data.reason}")
        return
    try:
        read(parts, data)
    except (ValueError, KeyError, TypeError) as exc:
        parts.notes.append(f"{tool}: {exc}")


def _per_training_step(
    step_time: StepTime, capture: CaptureFile, events: HostEvents | None
) -> list[str]:
    """XProf's marked steps as the job's training steps: the time between markers added, then
    divided by the steps each marker holds."""
    notes = add_time_between_markers(step_time, events.steps) if events is not None else []
    if events is not None:
        read_examples_per_step(step_time, events.steps)
    return notes + per_training_step(step_time, capture_span_ms(capture))


def _host_summary(capture: CaptureFile, events: HostEvents | None) -> HostSummary:
    """One host on its own, read through a directory of its own.

    XProf caches op stats beside the files it reads, under one name whatever the hosts. Read
    in the run directory, one host's stats would replace the run's all-hosts cache, which
    XProf's UI serves later; alone, both tools here share one conversion of this host.
    """
    path = capture.path
    with tempfile.TemporaryDirectory(prefix="xprof-host-") as alone:
        link = Path(alone) / path.name
        link.symlink_to(path.resolve())
        step_time, _ = read_step_time(tool_data([link], "overview_page"))
        _per_training_step(step_time, capture, events)
        capture.release()  # its last reader: the next host's conversion needs the memory
        ops = read_ops(tool_data([link], "framework_op_stats")) if step_time.avg_ms else []
    parts = step_time.breakdown_avg
    input_share = busy = None
    host_collectives = 0.0
    if step_time.avg_ms:
        input_share = round(parts.input_ms / step_time.avg_ms, 3)
        host_collectives = round(host_communication_ms(ops) / max(step_time.count, 1), 3)
        waiting = parts.other_ms + parts.collectives_ms + host_collectives
        busy = round(max(0.0, step_time.avg_ms - waiting), 3)
    return HostSummary(
        host=capture.host,
        step_count=step_time.count,
        step_time_ms_avg=step_time.avg_ms,
        input_share=input_share,
        breakdown_avg=parts,
        host_collectives_ms_avg=host_collectives,
        busy_ms_avg=busy,
    )
