"""One pass over the capture's host plane for what XProf reads but does not report.

XProf builds its tf-function statistics from the call events TF records for each `tf.function`
call (stats `tf_function_call`: traced or not, XLA or not; `tracing_count`), but its overview
page's JSON leaves them out; it reports `compile_time_ms_avg` 0.0 on CPU captures that spent
most of each step in XLA compilation (measured on TF 2.21: 60 ms of every 69 ms step); its input
pipeline analyzer names the iterators but not their parallelism, which a `MapAndBatch` hides.
This module collects those events in one pass over the host plane, which also classifies every
event for the GPU reading (host_activity.py) and keeps the allocators' events for the memory
readers (`HostEvents.memory_of`: kept_memory.py, step_allocations.py); the readers that turn them
into the summary are `tf_functions.py`, `step_allocations.py` and `input_pipeline.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler_service.analysis.models import HostActivity
from profiler_service.analysis.readers.host_activity import HostActivityCollector, Intervals
from profiler_service.analysis.readers.xplane import HOST_PLANE, CaptureFile, as_capture

GRAPH_BUILDING = "tf.function-graph_building"
KERNEL_EXECUTE = "EagerKernelExecute"
# An asynchronous op's start on an executor thread: where Keras's `jit_compile` step compiles.
ASYNC_OP_START = "ExecutorState::ProcessAsync::Start"
# An op run eagerly from Python: its entry points (the fast path, the slow path, conversions),
# the op itself (`EagerLocalExecute: MatMul`, a tf.function's call too: `__inference_...`) and
# its kernel's run, what a graph would keep of it.
EAGER_ENTRIES = frozenset(
    {"TFE_Py_FastPathExecute_C", "EagerExecute", "convert_to_tensor", "tf.constant"}
)
EAGER_OP_PREFIX = "EagerLocalExecute: "
EAGER_KERNEL_RUNS = frozenset({"KernelAndDeviceFunc::Run", "KernelAndDeviceOp::Run"})
ALLOCATION, DEALLOCATION = "MemoryAllocation", "MemoryDeallocation"
MEMORY_EVENTS = (ALLOCATION, DEALLOCATION)
# The memory events' stats that kept_memory.py and step_allocations.py read.
MEMORY_STATS = frozenset({"allocator_name", "addr", "tf_op", "shape", "allocation_bytes"})
_INDEX = re.compile(r"\[\d+\]")
SPAN_TAIL_EVENTS = 64  # a line's last events, whose latest end closes the capture's span


@dataclass(frozen=True)
class Span:
    line: int
    start_ps: int
    end_ps: int
    name: str
    stats: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class HostEvents:
    """The events of one host plane the readers need, each kind in time order per line."""

    span_ps: int = 0
    calls: list[Span] = field(default_factory=list)  # tf.function calls (`tf_function_call`)
    graph_building: list[Span] = field(default_factory=list)
    kernel_executions: list[Span] = field(default_factory=list)
    compiles: list[Span] = field(default_factory=list)  # `<Backend>Compiler::RunBackend`
    # The ops XLA compiles on first run: a jit-compiled function's own op on the calling
    # thread, `_XlaCompile`, or an asynchronous op on an executor thread (Keras's train step).
    compiled_ops: list[Span] = field(default_factory=list)
    steps: list[Span] = field(default_factory=list)  # events with a `step_num`
    eager_entries: list[Span] = field(default_factory=list)  # EAGER_ENTRIES
    eager_ops: list[Span] = field(default_factory=list)  # `EagerLocalExecute: <op>`
    eager_kernels: list[Span] = field(default_factory=list)  # EAGER_KERNEL_RUNS
    # Iterator path ([indices] removed) -> the stats of its first event.
    iterators: dict[str, dict[str, Any]] = field(default_factory=dict)
    memory: list[Span] = field(default_factory=list)  # one allocator's, when asked for
    activity: dict[HostActivity, Intervals] | None = None  # every event's, when asked for
    # Every allocator's memory events as the pass met them (line, line's start, name, event),
    # read into spans only for the allocators the memory profile asks about (`memory_of`).
    memory_events: list[tuple[int, int, str, Any]] = field(default_factory=list, repr=False)
    stat_names: dict[int, str] = field(default_factory=dict, repr=False)

    def memory_of(self, allocator: str) -> list[Span]:
        """One allocator's allocation and deallocation events, in time order, with the stats
        the memory readers use (of about a dozen on each event)."""
        wanted = {k: name for k, name in self.stat_names.items() if name in MEMORY_STATS}
        found = []
        for line_index, base_ps, name, event in self.memory_events:
            stats = _stats(event, self.stat_names, wanted)
            if stats.get("allocator_name") != allocator:
                continue
            start = base_ps + event.offset_ps
            found.append(Span(line_index, start, start + event.duration_ps, name, stats))
        found.sort(key=lambda s: s.start_ps)
        return found


def _kind(name: str) -> str | None:
    """The kind of an event known by its name alone; None: decided by its stats."""
    if name == GRAPH_BUILDING:
        return "graph_building"
    if name == KERNEL_EXECUTE:
        return "kernel_executions"
    if name.endswith("Compiler::RunBackend"):
        return "compiles"
    if (
        (name.startswith("__inference_") and ":" in name)
        or name.endswith((":_XlaCompile", ":XlaLaunch"))
        or name == ASYNC_OP_START
    ):
        return "compiled_ops"
    if name.startswith("Iterator::"):
        return "iterators"
    if name in EAGER_ENTRIES:
        return "eager_entries"
    if name.startswith(EAGER_OP_PREFIX):
        return "eager_ops"
    if name in EAGER_KERNEL_RUNS:
        return "eager_kernels"
    if name in MEMORY_EVENTS:
        return "memory"
    return None


def read_host_events(
    capture: CaptureFile | Path, memory_allocator: str | None = None, activity: bool = False
) -> HostEvents:
    """The host plane's tf.function calls, compilations, iterators and steps; with
    `memory_allocator`, that allocator's allocation and deallocation events too; with
    `activity`, every event's activity for the GPU reading, from the same pass."""
    capture = as_capture(capture)
    plane = capture.plane(HOST_PLANE)
    found = HostEvents()
    if plane is None:
        return found
    event_names = {k: v.name for k, v in plane.event_metadata.items()}
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    by_stat = {name: k for k, name in stat_names.items()}
    call_stat, step_stat = by_stat.get("tf_function_call"), by_stat.get("step_num")
    collector = HostActivityCollector(event_names, stat_names) if activity else None
    kinds: dict[int, str] = {}
    iterators_read: set[int] = set()
    first_ps, last_ps = None, 0
    for line_index, line in enumerate(plane.lines):
        base_ps = line.timestamp_ns * 1000
        if not line.events:
            continue
        on_tf_data = line.name.startswith("tf_data")
        # Events are written in start order: the span is read from each line's ends only.
        start = base_ps + line.events[0].offset_ps
        first_ps = start if first_ps is None else min(first_ps, start)
        for event in line.events[-SPAN_TAIL_EVENTS:]:
            last_ps = max(last_ps, base_ps + event.offset_ps + event.duration_ps)
        for event in line.events:
            if collector is not None:
                collector.add(event, base_ps, on_tf_data)
            meta = event.metadata_id
            kind = kinds.get(meta)
            if kind is None:
                kind = _kind(event_names.get(meta, "")) or ""
                if not kind:
                    ids = {s.metadata_id for s in event.stats}
                    kind = "calls" if call_stat in ids else "steps" if step_stat in ids else ""
                kinds[meta] = kind
            if not kind:
                continue
            name = event_names[meta]
            if kind == "memory":
                found.memory_events.append((line_index, base_ps, name, event))
                continue
            if kind == "iterators":
                if meta not in iterators_read:
                    stats = _stats(event, stat_names)
                    if stats:
                        iterators_read.add(meta)
                        found.iterators.setdefault(_INDEX.sub("", name), stats)
                continue
            stats = _stats(event, stat_names) if kind in ("calls", "steps", "compiles") else {}
            start = base_ps + event.offset_ps
            end = start + event.duration_ps
            getattr(found, kind).append(Span(line_index, start, end, name, stats))
    found.span_ps = last_ps - (first_ps or 0)
    for kind in ("calls", "graph_building", "kernel_executions", "compiles", "compiled_ops"):
        getattr(found, kind).sort(key=lambda s: (s.line, s.start_ps, -s.end_ps))
    found.steps.sort(key=lambda s: s.start_ps)
    found.stat_names = stat_names
    if memory_allocator is not None:
        found.memory = found.memory_of(memory_allocator)
    if collector is not None:
        found.activity = collector.intervals()
    return found


def _stats(
    event: Any, stat_names: dict[int, str], only: dict[int, str] | None = None
) -> dict[str, Any]:
    """The event's stats by name; with `only`, just the stats of those ids."""
    stats: dict[str, Any] = {}
    for stat in event.stats:
        if only is None:
            name = stat_names.get(stat.metadata_id, "")
        elif (name := only.get(stat.metadata_id)) is None:
            continue
        if stat.HasField("ref_value"):
            stats[name] = stat_names.get(stat.ref_value, "")
        elif stat.HasField("str_value"):
            stats[name] = stat.str_value
        else:
            stats[name] = stat.int64_value or stat.uint64_value
    return stats


def enclosing(outers: list[Span], inners: list[Span]) -> list[Span | None]:
    """For each of `inners`, the innermost of `outers` on its line that holds it whole (one
    sweep over both in time order, with the open outers on a stack)."""
    order = sorted(
        [(s.line, s.start_ps, 0, -s.end_ps, i) for i, s in enumerate(outers)]
        + [(s.line, s.start_ps, 1, -s.end_ps, i) for i, s in enumerate(inners)]
    )
    found: list[Span | None] = [None] * len(inners)
    open_outers: list[Span] = []
    line = None
    for event_line, start, is_inner, _, index in order:
        if event_line != line:
            open_outers, line = [], event_line
        while open_outers and open_outers[-1].end_ps <= start:
            open_outers.pop()
        if is_inner:
            inner = inners[index]
            found[index] = next(
                (o for o in reversed(open_outers) if o is not inner and o.end_ps >= inner.end_ps),
                None,
            )
        else:
            open_outers.append(outers[index])
    return found
