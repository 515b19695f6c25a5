"""Allocations kept across steps, read from the capture's own memory events.

XProf's memory profile keeps at most 1,000 timeline events and names the allocations alive at
the peak only for the peak's step, so in a capture of a few seconds it cannot say which op's
outputs pile up. The capture has every allocation and free (`MemoryAllocation` /
`MemoryDeallocation` events on the host plane, with the op, shape, address and size); this
module pairs them by address, as XProf's own memory profile does, and groups what is still
alive at the end. It runs only when the memory profile already shows growth.

The sidecar imports no TensorFlow, so the XSpace schema is declared here: the fields read,
with the numbers of `tsl/profiler/protobuf/xplane.proto` (a test checks them against TF's).
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from profiler_service.analysis.models import KeptAllocation

HOST_PLANE = "/host:CPU"
_F = descriptor_pb2.FieldDescriptorProto
# message -> [(field, number, type, repeated, message type)]
XPLANE_FIELDS: dict[str, list[tuple[str, int, int, bool, str | None]]] = {
    "XSpace": [("planes", 1, _F.TYPE_MESSAGE, True, "XPlane")],
    "XPlane": [
        ("name", 2, _F.TYPE_STRING, False, None),
        ("lines", 3, _F.TYPE_MESSAGE, True, "XLine"),
        ("event_metadata", 4, _F.TYPE_MESSAGE, True, "XPlane.EventMetadataEntry"),
        ("stat_metadata", 5, _F.TYPE_MESSAGE, True, "XPlane.StatMetadataEntry"),
    ],
    "XLine": [
        ("timestamp_ns", 3, _F.TYPE_INT64, False, None),
        ("events", 4, _F.TYPE_MESSAGE, True, "XEvent"),
    ],
    "XEvent": [
        ("metadata_id", 1, _F.TYPE_INT64, False, None),
        ("offset_ps", 2, _F.TYPE_INT64, False, None),
        ("stats", 4, _F.TYPE_MESSAGE, True, "XStat"),
    ],
    "XStat": [
        ("metadata_id", 1, _F.TYPE_INT64, False, None),
        ("uint64_value", 3, _F.TYPE_UINT64, False, None),
        ("int64_value", 4, _F.TYPE_INT64, False, None),
        ("str_value", 5, _F.TYPE_STRING, False, None),
        ("ref_value", 7, _F.TYPE_UINT64, False, None),
    ],
    "XEventMetadata": [
        ("id", 1, _F.TYPE_INT64, False, None),
        ("name", 2, _F.TYPE_STRING, False, None),
    ],
    "XStatMetadata": [
        ("id", 1, _F.TYPE_INT64, False, None),
        ("name", 2, _F.TYPE_STRING, False, None),
    ],
}
_PACKAGE = "profiler_service.xplane"
MIN_KEPT = 3  # allocations of one op and shape, kept: fewer is one step's own work


@cache
def _xspace_class() -> Any:
    proto = descriptor_pb2.FileDescriptorProto(
        name="profiler_service/xplane_subset.proto", package=_PACKAGE, syntax="proto2"
    )
    for name, fields in XPLANE_FIELDS.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, repeated, type_name in fields:
            message.field.add(
                name=field,
                number=number,
                type=kind,
                label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL,
                type_name=f".{_PACKAGE}.{type_name}" if type_name else None,
            )
        if name == "XPlane":
            for entry, value in (
                ("EventMetadataEntry", "XEventMetadata"),
                ("StatMetadataEntry", "XStatMetadata"),
            ):
                nested = message.nested_type.add(name=entry)
                nested.options.map_entry = True
                nested.field.add(name="key", number=1, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
                nested.field.add(
                    name="value",
                    number=2,
                    type=_F.TYPE_MESSAGE,
                    label=_F.LABEL_OPTIONAL,
                    type_name=f".{_PACKAGE}.{value}",
                )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.XSpace"))


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
