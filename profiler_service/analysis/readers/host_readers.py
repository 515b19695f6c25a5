"""The summary's parts read from the capture's own host events (host_events.py), each file parsed
once: tf.function traces and XLA compilations, the tf.data iterators' parallelism, and, beside
XProf's memory profile, the allocations a growing allocator keeps and what each op allocates per
step where memory rises and falls every step."""

from __future__ import annotations

import dataclasses

from profiler_service.analysis.models import AllocatorMemory, TfFunctions
from profiler_service.analysis.readers.host_events import HostEvents
from profiler_service.analysis.readers.kept_memory import kept_allocations
from profiler_service.analysis.readers.memory import may_be_growing
from profiler_service.analysis.readers.step_allocations import (
    allocations_by_op,
    step_swing_bytes,
    worth_reading,
)
from profiler_service.analysis.readers.tf_functions import summarise_tf_functions


def costliest_tf_functions(events_by_host: dict[str, HostEvents]) -> TfFunctions | None:
    """The tf.functions of the host whose traces and compilations cost the most."""
    found = (summarise_tf_functions(events, host) for host, events in events_by_host.items())
    return max((f for f in found if f is not None), key=_cost_ms, default=None)


def _cost_ms(functions: TfFunctions) -> float:
    return sum(f.tracing_ms + f.compile_ms for f in functions.functions)


def add_allocations(allocators: list[AllocatorMemory], events: HostEvents) -> None:
    """What a host's memory profile cannot say, from its memory events: the allocations kept by
    an allocator that may be growing, and, for the one whose memory swings most every step,
    what each op allocates per step."""
    for allocator in allocators:
        if may_be_growing(allocator):
            allocator.kept_allocations = kept_allocations(events.memory_of(allocator.allocator))
    sawtooth = [m for m in allocators if worth_reading(m)]
    memory = max(sawtooth, key=step_swing_bytes, default=None)
    if memory is not None:
        with_memory = dataclasses.replace(events, memory=events.memory_of(memory.allocator))
        memory.allocations_by_op = allocations_by_op(with_memory)
