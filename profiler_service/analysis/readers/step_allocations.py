"""Which ops allocate the most in each step, from the capture's memory events.

When memory rises and falls inside every step without growing, XProf's memory profile shows the
sawtooth but names allocations only at the one peak it keeps, from a timeline cut to 1,000
events. The capture has every allocation with its op and shape: this module sums them per
marked step by op, and pairs each with its free (by address) to find the most of an op's
allocations alive at once. It runs wherever the peak stands above the steps' low point, whether
or not the low points also climb: a floor that steps up once under load is no leak, and which
it is the rules decide (memory_growth, step_temporaries), from the whole memory summary.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections import Counter, defaultdict

from profiler_service.analysis.models import AllocatorMemory, OpAllocations
from profiler_service.analysis.readers.host_events import ALLOCATION, HostEvents

MAX_OPS = 5
MAX_SHAPES = 3
# The peak must stand this far above the steps' usual low point for the per-op reading to be
# worth a pass over the memory events; the rule's own thresholds are higher.
READ_MIN_SWING_BYTES = 1 << 20


def step_swing_bytes(memory: AllocatorMemory) -> int:
    """How far the peak stands above the steps' median low point: what one step allocates and
    frees at most."""
    if not memory.step_floors:
        return 0
    floor = statistics.median(p.bytes_in_use for p in memory.step_floors)
    return max(0, memory.peak_bytes_in_use - int(floor))


def worth_reading(memory: AllocatorMemory) -> bool:
    """A sawtooth: the peak stands above the steps' low point."""
    return step_swing_bytes(memory) >= READ_MIN_SWING_BYTES


def allocations_by_op(events: HostEvents, max_ops: int = MAX_OPS) -> list[OpAllocations]:
    """Per op, what its allocations in marked steps add up to per step (bytes, count) and the
    most bytes of them alive at one time; the largest per step first."""
    steps = [s for s in events.steps if s.end_ps > s.start_ps]
    if not steps or not events.memory:
        return []
    starts = [s.start_ps for s in steps]
    per_op_bytes: dict[str, int] = defaultdict(int)
    per_op_count: dict[str, int] = defaultdict(int)
    shapes: dict[str, Counter[str]] = defaultdict(Counter)
    alive: dict[object, tuple[str, int]] = {}
    alive_bytes: dict[str, int] = defaultdict(int)
    peak_alive: dict[str, int] = defaultdict(int)
    for event in events.memory:
        address = event.stats.get("addr")
        if event.name == ALLOCATION:
            op = str(event.stats.get("tf_op") or "unknown")
            size = int(event.stats.get("allocation_bytes") or 0)
            previous = alive.pop(address, None)
            if previous is not None:  # its free was not captured: count it freed now
                alive_bytes[previous[0]] -= previous[1]
            alive[address] = (op, size)
            alive_bytes[op] += size
            peak_alive[op] = max(peak_alive[op], alive_bytes[op])
            i = bisect_right(starts, event.start_ps) - 1
            if i >= 0 and event.start_ps <= steps[i].end_ps:
                per_op_bytes[op] += size
                per_op_count[op] += 1
                shapes[op][str(event.stats.get("shape") or "")] += size
        else:
            freed = alive.pop(address, None)
            if freed is not None:
                alive_bytes[freed[0]] -= freed[1]
    ranked = sorted(per_op_bytes, key=lambda op: (-per_op_bytes[op], op))[:max_ops]
    return [
        OpAllocations(
            op_name=op,
            shapes=[shape for shape, _ in shapes[op].most_common(MAX_SHAPES) if shape],
            bytes_per_step=round(per_op_bytes[op] / len(steps), 1),
            count_per_step=round(per_op_count[op] / len(steps), 2),
            peak_alive_bytes=peak_alive[op],
        )
        for op in ranked
    ]
