"""Peak memory, capacity, fragmentation, the timeline and its growth, from XProf's memory profile.

On CPU captures TensorFlow 2.21 reports its host allocator (`mklcpu`), with the host's memory as
capacity; on GPUs, each device's BFC allocator.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from profiler_service.analysis.models import (
    AllocatorMemory,
    MemoryGrowth,
    MemoryPoint,
    PeakAllocation,
)
from profiler_service.analysis.readers.fit import fit_line

MAX_TIMELINE_POINTS = 300
MIN_FLOORS = 4  # low points needed to fit a growth line
MIN_SAMPLES_PER_FLOOR = 3  # steps are grouped until their low point rests on this many events
TIME_WINDOWS = 10  # without step markers: low points of this many equal slices of the capture
MAX_PEAK_ALLOCATIONS = 5
# Growth this line-like sends the analysis to the capture's own memory events for what is kept
# (analysis/readers/kept_memory.py); a flat or noisy low point does not pay for reading them.
KEPT_SEARCH_MIN_R2 = 0.5
# Ops whose outputs are fresh copies of their inputs: kept alive, they are what ran the
# article's second case study out of memory.
TEMPORARY_OP_TYPES = ("Concat", "ConcatV2", "Pack", "Stack", "TensorListStack", "Tile")


def read_memory(profile: dict) -> list[AllocatorMemory]:
    """XProf's memory profile of one host, per allocator."""
    return [
        _allocator_memory(allocator, data)
        for allocator, data in sorted((profile.get("memoryProfilePerAllocator") or {}).items())
    ]


def _int(value) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _allocator_memory(allocator: str, data: dict) -> AllocatorMemory:
    profile_summary = data.get("profileSummary") or {}
    peak = profile_summary.get("peakStats") or {}
    capacity = _int(profile_summary.get("memoryCapacity")) or None
    peak_bytes = _int(peak.get("peakBytesInUse")) or _int(
        profile_summary.get("peakBytesUsageLifetime")
    )
    snapshots = data.get("memoryProfileSnapshots") or []
    sampled = data.get("sampledTimelineSnapshots") or snapshots
    t0_ps = _int(sampled[0].get("timeOffsetPs")) if sampled else 0
    events = _events(sampled, t0_ps)
    timeline = [
        MemoryPoint(time_ms=e.time_ms, bytes_in_use=e.bytes_in_use)
        for e in events[:: max(1, math.ceil(len(events) / MAX_TIMELINE_POINTS))]
    ]
    temporaries_bytes, temporaries_ops = _peak_temporaries(data, snapshots)
    fragmentation = peak.get("fragmentation")
    basis, floors, steps = step_floors(events)
    growth = fit_growth(basis, floors, steps, capacity, peak_bytes)
    return AllocatorMemory(
        allocator=allocator,
        peak_bytes_in_use=peak_bytes,
        capacity_bytes=capacity,
        peak_share_of_capacity=round(peak_bytes / capacity, 4) if capacity else None,
        fragmentation_share=float(fragmentation) if fragmentation is not None else None,
        timeline=timeline,
        peak_temporaries_bytes=temporaries_bytes,
        peak_temporaries_ops=temporaries_ops,
        step_floors=[MemoryPoint(time_ms=t, bytes_in_use=b) for t, b in floors][
            :: max(1, math.ceil(len(floors) / MAX_TIMELINE_POINTS))
        ],
        growth=growth,
        alive_before_capture_bytes=_alive_before_capture(data),
        alive_at_peak=_alive_at_peak(data, snapshots, t0_ps),
    )


@dataclass(frozen=True)
class _Event:
    time_ms: float
    bytes_in_use: int
    step: int | None


def _events(sampled: list[dict], t0_ps: int) -> list[_Event]:
    """XProf's timeline, read once: for the chart, the low points and nothing else."""
    events = []
    for snap in sampled:
        agg = snap.get("aggregationStats") or {}
        meta = snap.get("activityMetadata") or {}
        events.append(
            _Event(
                time_ms=(_int(snap.get("timeOffsetPs")) - t0_ps) / 1e9,
                bytes_in_use=_int(agg.get("heapAllocatedBytes"))
                + _int(agg.get("stackReservedBytes")),
                step=_step_id(meta),
            )
        )
    return events


def _step_id(meta: dict) -> int | None:
    step = meta.get("stepId")
    return _int(step) if step not in (None, "") else None


def step_floors(events: list[_Event]) -> tuple[str, list[tuple[float, int]], int]:
    """(basis, [(time_ms, low point in bytes)], steps covered).

    By marked step when there are enough steps (the first and last are partial and left out),
    consecutive steps grouped so each low point rests on a few events; else by equal slices.
    """
    by_step: dict[int, list[_Event]] = defaultdict(list)
    for event in events:
        if event.step is not None:
            by_step[event.step].append(event)
    order = sorted(by_step, key=lambda s: by_step[s][0].time_ms)[1:-1]
    inner = sum(len(by_step[s]) for s in order)
    if order:
        per_group = max(1, math.ceil(MIN_SAMPLES_PER_FLOOR * len(order) / max(inner, 1)))
        groups = [order[i : i + per_group] for i in range(0, len(order), per_group)]
        if len(groups) > 1 and len(groups[-1]) < per_group:
            groups.pop()  # a short last group would have a higher low point by chance
        if len(groups) >= MIN_FLOORS:
            floors = [_floor([e for s in g for e in by_step[s]]) for g in groups]
            return "steps", floors, len(groups) * per_group
    if len(events) < MIN_FLOORS * MIN_SAMPLES_PER_FLOOR:
        return "time", [], 0
    start, span = events[0].time_ms, (events[-1].time_ms - events[0].time_ms) or 1.0
    slices: list[list[_Event]] = [[] for _ in range(TIME_WINDOWS)]
    for event in events:
        slices[min(TIME_WINDOWS - 1, int((event.time_ms - start) / span * TIME_WINDOWS))].append(
            event
        )
    return "time", [_floor(s) for s in slices if s], 0


def _floor(events: list[_Event]) -> tuple[float, int]:
    low = min(events, key=lambda e: (e.bytes_in_use, e.time_ms))
    return low.time_ms, low.bytes_in_use


def fit_growth(
    basis: str,
    floors: list[tuple[float, int]],
    steps: int,
    capacity: int | None,
    peak_bytes: int,
) -> MemoryGrowth | None:
    if len(floors) < MIN_FLOORS:
        return None
    per_s = [(t / 1000, float(b)) for t, b in floors]
    bytes_per_s, r2 = fit_line(per_s)
    half = len(per_s) // 2
    first, _ = fit_line(per_s[: half + 1])
    second, _ = fit_line(per_s[half:])
    span_s = per_s[-1][0] - per_s[0][0]
    to_capacity = None
    if capacity and bytes_per_s > 0:
        to_capacity = round(max(0, capacity - peak_bytes) / bytes_per_s, 1)
    return MemoryGrowth(
        basis=basis,
        points=len(floors),
        steps=steps,
        bytes_per_step=(
            _per_step(bytes_per_s * span_s, steps, len(floors)) if basis == "steps" else None
        ),
        bytes_per_s=round(bytes_per_s, 1),
        r2=round(r2, 4),
        rising_share=round(_rising_share([b for _, b in floors]), 4),
        first_half_bytes_per_s=round(first, 1),
        second_half_bytes_per_s=round(second, 1),
        growth_bytes=round(bytes_per_s * span_s),
        seconds_to_capacity=to_capacity,
    )


def _rising_share(floors: list[int]) -> float:
    """The share of low points above the one before, or the one two before, whichever is more.

    A leak seen through TensorFlow's BFC allocator on the CPU zig-zags: a kept tensor lands in
    the free chunk of one step or the next, and the low points go +1, -0.5, +1 MiB (R² 0.999,
    56 % rising one to the next, 100 % two apart). Noise rises about half the time either way.
    """
    shares = []
    for lag in (1, 2):
        pairs = len(floors) - lag
        if pairs > 0:
            rose = sum(1 for a, b in zip(floors, floors[lag:], strict=False) if b > a)
            shares.append(rose / pairs)
    return max(shares, default=0.0)


def _per_step(growth_bytes: float, steps: int, floors: int) -> float | None:
    """Growth between the first and last low point, over the steps between them."""
    between = (floors - 1) * steps / floors
    return round(growth_bytes / between, 1) if between > 0 else None


def _alive_at_peak(data: dict, snapshots: list[dict], t0_ps: int) -> list[PeakAllocation]:
    """XProf's active allocations at the peak (those made in the peak's step), largest first."""
    found = []
    for allocation in data.get("activeAllocations") or []:
        index = _int(allocation.get("snapshotIndex"))
        if not 0 <= index < len(snapshots):
            continue
        meta = snapshots[index].get("activityMetadata") or {}
        found.append(
            PeakAllocation(
                op_name=str(meta.get("tfOpName") or "unknown"),
                shape=str(meta.get("tensorShape") or ""),
                data_type=str(meta.get("dataType") or ""),
                bytes=_int(meta.get("allocationBytes")),
                occurrences=max(1, _int(allocation.get("numOccurrences"))),
                step=_step_id(meta),
                time_ms=round((_int(snapshots[index].get("timeOffsetPs")) - t0_ps) / 1e9, 3),
            )
        )
    found.sort(key=lambda a: (-a.bytes * a.occurrences, a.time_ms))
    return found[:MAX_PEAK_ALLOCATIONS]


def may_be_growing(memory: AllocatorMemory) -> bool:
    g = memory.growth
    return g is not None and g.bytes_per_s > 0 and g.r2 >= KEPT_SEARCH_MIN_R2


def _alive_before_capture(data: dict) -> int:
    """XProf names what was allocated before the trace "unused preallocated device memory"."""
    special = data.get("specialAllocations") or []
    total = 0
    for allocation in data.get("activeAllocations") or []:
        index = _int(allocation.get("specialIndex"))
        if 0 <= index < len(special) and "preallocated" in str(special[index].get("tfOpName")):
            total += _int(special[index].get("allocationBytes"))
    return total


def _peak_temporaries(data: dict, snapshots: list[dict]) -> tuple[int, list[str]]:
    """Bytes alive at the peak that concat/stack-style ops allocated (XProf's active allocs)."""
    total, names = 0, []
    for allocation in data.get("activeAllocations") or []:
        index = _int(allocation.get("snapshotIndex"))
        if index < 0 or index >= len(snapshots):
            continue
        meta = snapshots[index].get("activityMetadata") or {}
        op_name = str(meta.get("tfOpName") or "")
        if any(kind in op_name for kind in TEMPORARY_OP_TYPES):
            total += _int(meta.get("allocationBytes")) * max(
                1, _int(allocation.get("numOccurrences"))
            )
            if op_name not in names:
                names.append(op_name)
    return total, names[:5]
