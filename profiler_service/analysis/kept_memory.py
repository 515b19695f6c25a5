"""Allocations kept across steps, read from the capture's own memory events.

XProf's memory profile keeps at most 1,000 timeline events and names the allocations alive at
the peak only for the peak's step, so in a capture of a few seconds it cannot say which op's
outputs pile up. The capture has every allocation and free (`MemoryAllocation` /
`MemoryDeallocation` events on the host plane, with the op, shape, address and size); this
module pairs them by address, as XProf's own memory profile does, and groups what is still
alive at the end. It runs only when the memory profile already shows growth.

The sidecar imports no TensorFlow, so the XSpace fields read are declared here
(proto_subset.py; a test checks their numbers against TF's `xplane_pb2`).
"""

from __future__ import annotations

import mmap
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

from profiler_service.analysis.models import KeptAllocation
from profiler_service.proto_subset import F, message_classes

HOST_PLANE = "/host:CPU"
# The fields read, as tsl/profiler/protobuf/xplane.proto numbers them.
XPLANE_FIELDS = {
    "XSpace": [("planes", 1, F.TYPE_MESSAGE, True, "XPlane")],
    "XPlane": [
        ("name", 2, F.TYPE_STRING, False, None),
        ("lines", 3, F.TYPE_MESSAGE, True, "XLine"),
        ("event_metadata", 4, F.TYPE_MESSAGE, True, "XPlane.EventMetadataEntry"),
        ("stat_metadata", 5, F.TYPE_MESSAGE, True, "XPlane.StatMetadataEntry"),
    ],
    "XLine": [
        ("timestamp_ns", 3, F.TYPE_INT64, False, None),
        ("events", 4, F.TYPE_MESSAGE, True, "XEvent"),
    ],
    "XEvent": [
        ("metadata_id", 1, F.TYPE_INT64, False, None),
        ("offset_ps", 2, F.TYPE_INT64, False, None),
        ("duration_ps", 3, F.TYPE_INT64, False, None),
        ("stats", 4, F.TYPE_MESSAGE, True, "XStat"),
    ],
    "XStat": [
        ("metadata_id", 1, F.TYPE_INT64, False, None),
        ("uint64_value", 3, F.TYPE_UINT64, False, None),
        ("int64_value", 4, F.TYPE_INT64, False, None),
        ("str_value", 5, F.TYPE_STRING, False, None),
        ("ref_value", 7, F.TYPE_UINT64, False, None),
    ],
    "XEventMetadata": [
        ("id", 1, F.TYPE_INT64, False, None),
        ("name", 2, F.TYPE_STRING, False, None),
    ],
    "XStatMetadata": [
        ("id", 1, F.TYPE_INT64, False, None),
        ("name", 2, F.TYPE_STRING, False, None),
    ],
}
XPLANE_MAPS = {
    "XPlane.EventMetadataEntry": (F.TYPE_INT64, "XEventMetadata"),
    "XPlane.StatMetadataEntry": (F.TYPE_INT64, "XStatMetadata"),
}
MIN_KEPT = 3  # allocations of one op and shape, kept: fewer is one step's own work


def has_memory_events(xplane: Path) -> bool:
    """Whether the capture holds any allocator event. XProf's memory profile is built from these
    events alone, so a capture whose bytes never name them has none, and the conversion (a parse
    of the whole file) can be skipped. A scan of a 30 MB file takes milliseconds."""
    try:
        with xplane.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(b"MemoryAllocation") != -1
    except (OSError, ValueError):  # unreadable or empty: let XProf say what is wrong
        return True


@cache
def _xspace_class() -> Any:
    return message_classes("profiler_service.xplane", XPLANE_FIELDS, XPLANE_MAPS)["XSpace"]


def read_xspace(xplane: Path) -> Any:
    """The capture's XSpace, with the fields declared above (host_events.py reads it too)."""
    space = _xspace_class()()
    space.ParseFromString(xplane.read_bytes())
    return space


def kept_allocations_in_capture(
    xplane: Path, allocator: str, max_groups: int = 5
) -> list[KeptAllocation]:
    """Allocations of `allocator` made in the first half of the capture and never freed in it,
    grouped by op and shape, largest first."""
    space = _xspace_class()()
    space.ParseFromString(xplane.read_bytes())
    plane = next((p for p in space.planes if p.name == HOST_PLANE), None)
    if plane is None:
        return []
    event_names = {k: v.name for k, v in plane.event_metadata.items()}
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    wanted = {k for k, n in event_names.items() if n in ("MemoryAllocation", "MemoryDeallocation")}
    events = []
    for line in plane.lines:
        base_ps = line.timestamp_ns * 1000
        for event in line.events:
            if event.metadata_id not in wanted:
                continue
            stats = {}
            for stat in event.stats:
                name = stat_names.get(stat.metadata_id, "")
                if stat.HasField("ref_value"):
                    stats[name] = stat_names.get(stat.ref_value, "")
                elif stat.HasField("str_value"):
                    stats[name] = stat.str_value
                else:
                    stats[name] = stat.int64_value or stat.uint64_value
            if stats.get("allocator_name") == allocator:
                events.append((base_ps + event.offset_ps, event_names[event.metadata_id], stats))
    if not events:
        return []
    events.sort(key=lambda e: e[0])
    start, end = events[0][0], events[-1][0]
    alive: dict[Any, tuple[int, dict]] = {}
    for time_ps, name, stats in events:
        if name == "MemoryAllocation":
            alive[stats.get("addr")] = (time_ps, stats)
        else:
            alive.pop(stats.get("addr"), None)
    groups: dict[tuple[str, str], list[tuple[int, dict]]] = defaultdict(list)
    for time_ps, stats in alive.values():
        if time_ps <= start + (end - start) / 2:
            groups[(str(stats.get("tf_op") or "unknown"), str(stats.get("shape") or ""))].append(
                (time_ps, stats)
            )
    kept = [
        KeptAllocation(
            op_name=op,
            shape=shape,
            count=len(group),
            bytes=sum(int(s.get("allocation_bytes") or 0) for _, s in group),
            first_time_ms=round((min(t for t, _ in group) - start) / 1e9, 3),
        )
        for (op, shape), group in groups.items()
        if len(group) >= MIN_KEPT
    ]
    kept.sort(key=lambda k: (-k.bytes, k.first_time_ms))
    return kept[:max_groups]
