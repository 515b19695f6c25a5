"""Allocations kept across steps, read from the capture's own memory events.

XProf's memory profile keeps at most 1,000 timeline events and names the allocations alive at
the peak only for the peak's step, so in a capture of a few seconds it cannot say which op's
outputs pile up. The capture has every allocation and free (`MemoryAllocation` /
`MemoryDeallocation` events on the host plane, with the op, shape, address and size); this
module pairs them by address, as XProf's own memory profile does, and groups what is still
alive at the end. It runs only when the memory profile already shows growth.

The events are the host pass's (host_events.py), from the capture parsed once (xplane.py).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from profiler_service.analysis.models import KeptAllocation
from profiler_service.analysis.readers.host_events import ALLOCATION, Span, read_host_events
from profiler_service.analysis.readers.xplane import CaptureFile, file_contains

MIN_KEPT = 3  # allocations of one op and shape, kept: fewer is one step's own work


def has_memory_events(xplane: Path) -> bool:
    """Whether the capture holds any allocator event. XProf's memory profile is built from these
    events alone, so a capture whose bytes never name them has none, and the conversion (a parse
    of the whole file) can be skipped."""
    try:
        return file_contains(xplane, ALLOCATION.encode())
    except (OSError, ValueError):  # unreadable: let XProf say what is wrong
        return True


def kept_allocations_in_capture(
    capture: CaptureFile | Path, allocator: str
) -> list[KeptAllocation]:
    """`kept_allocations` of one file read on its own (the analysis reuses its host pass)."""
    return kept_allocations(read_host_events(capture).memory_of(allocator))


def kept_allocations(events: list[Span], max_groups: int = 5) -> list[KeptAllocation]:
    """Of one allocator's memory events (in time order), the allocations made in the first half
    of the capture and never freed in it, grouped by op and shape, largest first."""
    if not events:
        return []
    start, end = events[0].start_ps, events[-1].start_ps
    alive: dict[Any, Span] = {}
    for event in events:
        if event.name == ALLOCATION:
            alive[event.stats.get("addr")] = event
        else:
            alive.pop(event.stats.get("addr"), None)
    groups: dict[tuple[str, str], list[Span]] = defaultdict(list)
    for event in alive.values():
        if event.start_ps <= start + (end - start) / 2:
            stats = event.stats
            key = (str(stats.get("tf_op") or "unknown"), str(stats.get("shape") or ""))
            groups[key].append(event)
    kept = [
        KeptAllocation(
            op_name=op,
            shape=shape,
            count=len(group),
            bytes=sum(int(e.stats.get("allocation_bytes") or 0) for e in group),
            first_time_ms=round((min(e.start_ps for e in group) - start) / 1e9, 3),
        )
        for (op, shape), group in groups.items()
        if len(group) >= MIN_KEPT
    ]
    kept.sort(key=lambda k: (-k.bytes, k.first_time_ms))
    return kept[:max_groups]
