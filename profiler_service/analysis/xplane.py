"""The capture's own events: an XSpace read without TensorFlow.

XProf computes what it can from a capture; where it gives nothing (allocations kept across
steps, what each GPU and the host did over time) the analysis reads the `.xplane.pb` itself.
The sidecar imports no TensorFlow, so the fields read are declared here (proto_subset.py; a
test checks their numbers against TF's `xplane_pb2`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from profiler_service.proto_subset import F, message_classes

HOST_PLANE = "/host:CPU"
GPU_PLANE_PREFIX = "/device:GPU:"
# The fields read, as tsl/profiler/protobuf/xplane.proto numbers them.
XPLANE_FIELDS = {
    "XSpace": [("planes", 1, F.TYPE_MESSAGE, True, "XPlane")],
    "XPlane": [
        ("id", 1, F.TYPE_INT64, False, None),
        ("name", 2, F.TYPE_STRING, False, None),
        ("lines", 3, F.TYPE_MESSAGE, True, "XLine"),
        ("event_metadata", 4, F.TYPE_MESSAGE, True, "XPlane.EventMetadataEntry"),
        ("stat_metadata", 5, F.TYPE_MESSAGE, True, "XPlane.StatMetadataEntry"),
        ("stats", 6, F.TYPE_MESSAGE, True, "XStat"),
    ],
    "XLine": [
        ("id", 1, F.TYPE_INT64, False, None),
        ("name", 2, F.TYPE_STRING, False, None),
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
        ("double_value", 2, F.TYPE_DOUBLE, False, None),
        ("uint64_value", 3, F.TYPE_UINT64, False, None),
        ("int64_value", 4, F.TYPE_INT64, False, None),
        ("str_value", 5, F.TYPE_STRING, False, None),
        ("ref_value", 7, F.TYPE_UINT64, False, None),
    ],
    "XEventMetadata": [
        ("id", 1, F.TYPE_INT64, False, None),
        ("name", 2, F.TYPE_STRING, False, None),
        ("stats", 5, F.TYPE_MESSAGE, True, "XStat"),
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


@cache
def _xspace_class() -> Any:
    return message_classes("profiler_service.xplane", XPLANE_FIELDS, XPLANE_MAPS)["XSpace"]


def read_xspace(path: Path) -> Any:
    """The whole XSpace of one `.xplane.pb` (raises DecodeError on a corrupt file)."""
    space = _xspace_class()()
    space.ParseFromString(path.read_bytes())
    return space


class PlaneNames:
    """A plane's event and stat names by id, and its stats read as plain values."""

    def __init__(self, plane: Any):
        self.events = {k: v.name for k, v in plane.event_metadata.items()}
        self.stats = {k: v.name for k, v in plane.stat_metadata.items()}

    def value(self, stat: Any) -> Any:
        if stat.HasField("ref_value"):
            return self.stats.get(stat.ref_value, "")
        for field in ("str_value", "double_value", "int64_value", "uint64_value"):
            if stat.HasField(field):
                return getattr(stat, field)
        return None

    def stat_dict(self, stats: Any) -> dict[str, Any]:
        return {self.stats.get(s.metadata_id, ""): self.value(s) for s in stats}
