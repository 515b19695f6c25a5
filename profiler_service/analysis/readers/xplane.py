"""The capture's own events: an XSpace read without TensorFlow.

XProf computes what it can from a capture; where it gives nothing (allocations kept across
steps, what each GPU and the host did over time) the analysis reads the `.xplane.pb` itself.
The sidecar imports no TensorFlow, so the fields read are declared here (proto_subset.py; a
test checks their numbers against TF's `xplane_pb2`).
"""

from __future__ import annotations

import mmap
import threading
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


def file_contains(path: Path, needle: bytes) -> bool:
    """Whether the file's bytes hold `needle`: a scan of a 30 MB capture takes milliseconds, so
    a reader can skip the parse of a capture without the events it reads (raises OSError)."""
    with path.open("rb") as f:
        if f.seek(0, 2) == 0:
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(needle) != -1


class CaptureFile:
    """One host's `.xplane.pb`, parsed at most once however many readers need its events (its
    span, the host events, the GPU planes, the kept allocations): a parse costs more than all
    of our reading of it, and a 1 s capture's analysis is short enough for four to show."""

    def __init__(self, path: Path):
        self.path = path
        self._space: Any = None
        self._lock = threading.Lock()  # readers on the analysis's threads ask at the same time

    @property
    def host(self) -> str:
        return self.path.name.removesuffix(".xplane.pb")

    def space(self) -> Any:
        """The parsed XSpace (raises OSError, or DecodeError on a corrupt file)."""
        with self._lock:
            if self._space is None:
                self._space = read_xspace(self.path)
            return self._space

    def plane(self, name: str) -> Any | None:
        return next((p for p in self.space().planes if p.name == name), None)

    def contains(self, needle: bytes) -> bool:
        return file_contains(self.path, needle)

    def release(self) -> None:
        """Drop the parse: the analysis's last reader is done with it."""
        with self._lock:
            self._space = None


def as_capture(capture: CaptureFile | Path) -> CaptureFile:
    return capture if isinstance(capture, CaptureFile) else CaptureFile(capture)


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
