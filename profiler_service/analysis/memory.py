"""Peak memory, capacity, fragmentation and the timeline, from XProf's memory profile.

Empty on CPU-only captures (TensorFlow's CPU allocator records no memory activity).
"""

from __future__ import annotations

import math

from profiler_service.analysis.models import AllocatorMemory, MemoryPoint, Summary

MAX_TIMELINE_POINTS = 300
# Ops whose outputs are fresh copies of their inputs: kept alive, they are what ran the
# article's second case study out of memory.
TEMPORARY_OP_TYPES = ("Concat", "ConcatV2", "Pack", "Stack", "TensorListStack", "Tile")


def summarise_memory(profile: dict, summary: Summary) -> None:
    for allocator, data in sorted((profile.get("memoryProfilePerAllocator") or {}).items()):
        summary.memory.append(_allocator_memory(allocator, data))


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
    timeline = []
    if sampled:
        step = max(1, math.ceil(len(sampled) / MAX_TIMELINE_POINTS))
        t0 = _int(sampled[0].get("timeOffsetPs"))
        for snap in sampled[::step]:
            agg = snap.get("aggregationStats") or {}
            in_use = _int(agg.get("heapAllocatedBytes")) + _int(agg.get("stackReservedBytes"))
            timeline.append(
                MemoryPoint(
                    time_ms=(_int(snap.get("timeOffsetPs")) - t0) / 1e9, bytes_in_use=in_use
                )
            )
    temporaries_bytes, temporaries_ops = _peak_temporaries(data, snapshots)
    fragmentation = peak.get("fragmentation")
    return AllocatorMemory(
        allocator=allocator,
        peak_bytes_in_use=peak_bytes,
        capacity_bytes=capacity,
        peak_share_of_capacity=round(peak_bytes / capacity, 4) if capacity else None,
        fragmentation_share=float(fragmentation) if fragmentation is not None else None,
        timeline=timeline,
        peak_temporaries_bytes=temporaries_bytes,
        peak_temporaries_ops=temporaries_ops,
    )


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
