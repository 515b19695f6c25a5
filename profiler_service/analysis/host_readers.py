"""The summary's parts read from the capture's own host events (host_events.py), one pass per
host: tf.function traces and XLA compilations, the tf.data iterators' parallelism, and, where
memory rises and falls every step, what each op allocates per step."""

from __future__ import annotations

from pathlib import Path

from google.protobuf.message import DecodeError

from profiler_service.analysis.host_events import read_host_events
from profiler_service.analysis.input_pipeline import add_iterator_stats
from profiler_service.analysis.models import AllocatorMemory, Summary, TfFunctions
from profiler_service.analysis.step_allocations import (
    allocations_by_op,
    step_swing_bytes,
    worth_reading,
)
from profiler_service.analysis.tf_functions import summarise_tf_functions


def summarise_host_events(
    paths: list[Path], summary: Summary, allocators: dict[Path, list[AllocatorMemory]]
) -> None:
    """Reads each host's events once; keeps the host whose tf.functions cost the most."""
    for path in paths:
        sawtooth = [m for m in allocators.get(path, []) if worth_reading(m)]
        memory = max(sawtooth, key=step_swing_bytes, default=None)
        try:
            events = read_host_events(path, memory.allocator if memory else None)
        except (OSError, ValueError, DecodeError) as exc:
            summary.notes.append(f"host events of {path.name}: {exc}")
            continue
        functions = summarise_tf_functions(events, path.name.removesuffix(".xplane.pb"))
        if functions is not None and (
            summary.tf_functions is None or _cost_ms(functions) > _cost_ms(summary.tf_functions)
        ):
            summary.tf_functions = functions
        if events.iterators and not any(i.datasets for i in summary.input_pipeline.iterators):
            add_iterator_stats(summary.input_pipeline, events.iterators)
        if memory is not None:
            memory.allocations_by_op = allocations_by_op(events)


def _cost_ms(functions: TfFunctions) -> float:
    return sum(f.tracing_ms + f.compile_ms for f in functions.functions)
