"""What each GPU and its host did over the capture, read from the capture's own planes.

XProf's overview gives no device idle share for GPUs, its kernel stats of older captures carry
no op names, and nothing in it says what the host was doing while a GPU waited. The capture
has it all: each `/device:GPU:N` plane holds its streams' kernels and copies (with the TF op
that launched them and the device's figures in the plane's stats), and `/host:CPU` holds the
host's threads. This module measures, per GPU, busy and idle time, copies by direction and
kernels by size, and splits each GPU's idle time by what the host did meanwhile (the article's
first case: the GPU waits while the host is in the tf.data iterator). Like Holistic Trace
Analysis, it reads the trace's intervals; unlike XProf it does not need step markers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from profiler_service.analysis.device_models import (
    GpuActivity,
    GpuCopies,
    GpuDevice,
    GpuKernels,
    HostActivity,
    HostLane,
)
from profiler_service.analysis.gpu_models import (
    COPY_DIRECTION,
    COPY_EVENT,
    GEMM_KERNEL,
    SIXTEEN_BIT_KERNEL,
    TENSOR_CORE_KERNEL,
    TENSOR_CORE_OPS,
    model_name,
    vendor_of,
)
from profiler_service.analysis.readers.host_activity import Intervals
from profiler_service.analysis.readers.host_events import read_host_events
from profiler_service.analysis.readers.xplane import (
    GPU_PLANE_PREFIX,
    CaptureFile,
    PlaneNames,
    as_capture,
)

SLICES = 60  # the timelines' resolution, whatever the capture's length
SHORT_KERNEL_US = 10.0  # a kernel shorter than this costs about what launching it costs

# Lines XProf derives from the streams (or the host), written into older captures: counting
# them would count each kernel twice.
DERIVED_LINES = frozenset(
    {
        "Steps",
        "TensorFlow Ops",
        "TensorFlow Name Scope",
        "XLA Ops",
        "XLA Modules",
        "XLA TraceMe",
        "Framework Ops",
        "Framework Name Scope",
        "Source code",
        "Launch Stats",
        "Async XLA Ops",
    }
)
# When the GPU idles, the host's activity that explains it first: waiting on input explains
# the gap even when an op or Python ran beside it.
# Then copies: the host staging data for the GPU explains the gap before the ops around them.
PRIORITY = (
    HostActivity.INPUT,
    HostActivity.TRANSFER,
    HostActivity.TF_OPS,
    HostActivity.PYTHON,
    HostActivity.TF_DATA,
)


def has_gpu_planes(capture: CaptureFile | Path) -> bool:
    """Whether the capture names a GPU plane (a byte scan: milliseconds for 30 MB)."""
    try:
        return as_capture(capture).contains(GPU_PLANE_PREFIX.encode())
    except (OSError, ValueError):
        return False


def read_gpu_activity(
    captures: Sequence[CaptureFile | Path],
    host_activity: Mapping[Path, dict[HostActivity, Intervals]] | None = None,
) -> GpuActivity | None:
    """Every GPU of every host file; None when no file has a GPU plane. `host_activity`: each
    file's host events by activity where the host pass read them already (host_events.py)."""
    activity = GpuActivity(slices=SLICES)
    captures = [as_capture(c) for c in captures]
    for capture in captures:
        if not has_gpu_planes(capture):
            continue
        host = (host_activity or {}).get(capture.path)
        if host is None:
            host = read_host_events(capture, activity=True).activity or {}
        prefix = capture.host if len(captures) > 1 else ""
        devices, lane = _read_host(capture.space(), host, prefix)
        activity.devices.extend(devices)
        if lane is not None:
            lane.host = capture.host
            activity.hosts.append(lane)
    return activity if activity.devices else None


def _read_host(
    space: Any, host: dict[HostActivity, Intervals], prefix: str
) -> tuple[list[GpuDevice], HostLane | None]:
    gpu_planes = sorted(
        (p for p in space.planes if p.name.startswith(GPU_PLANE_PREFIX)),
        key=lambda p: _device_number(p.name),
    )
    streams = {p.name: _Streams(p) for p in gpu_planes}
    firsts = [ivs[0].min() for ivs in host.values() if len(ivs[0])]
    lasts = [ivs[1].max() for ivs in host.values() if len(ivs[1])]
    firsts += [st.spans[0].min() for st in streams.values() if len(st.spans[0])]
    lasts += [st.spans[1].max() for st in streams.values() if len(st.spans[1])]
    if not firsts:
        return [], None
    start, end = int(min(firsts)), int(max(lasts))
    window = max(end - start, 1)
    host_busy = {act: _union(*host.get(act, (_EMPTY, _EMPTY))) for act in PRIORITY}
    devices = [
        _device(plane, streams[plane.name], start, end, host_busy, prefix) for plane in gpu_planes
    ]
    return devices, _host_lane(host_busy, start, window)


def _device_number(name: str) -> int:
    tail = name.removeprefix(GPU_PLANE_PREFIX)
    return int(tail) if tail.isdigit() else 0


_EMPTY = np.zeros(0, dtype=np.int64)
_OP_STATS = ("tf_op", "level 0", "annotation")


class _Streams:
    """The kernels, copies and memsets on a GPU's streams, as arrays."""

    def __init__(self, plane: Any):
        names = PlaneNames(plane)
        op_stat_ids = {k for k, v in names.stats.items() if v in _OP_STATS}
        kinds = {mid: _kind(name) for mid, name in names.events.items()}
        sixteen = {mid for mid, name in names.events.items() if SIXTEEN_BIT_KERNEL.search(name)}
        gemm = {mid for mid, name in names.events.items() if GEMM_KERNEL.search(name)}
        begins, ends, kind_of, eligible, low = [], [], [], [], []
        for line in plane.lines:
            if line.name in DERIVED_LINES or line.id < 0:
                continue
            base = line.timestamp_ns * 1000
            for event in line.events:
                if event.duration_ps <= 0:
                    continue
                kind = kinds.get(event.metadata_id, "kernel")
                begin = (base + event.offset_ps) // 1000
                begins.append(begin)
                ends.append(begin + max(event.duration_ps // 1000, 1))
                kind_of.append(kind)
                if kind == "kernel":
                    eligible.append(
                        event.metadata_id in gemm or _eligible_op(event, op_stat_ids, names)
                    )
                else:
                    eligible.append(kind == "tensor_core")
                low.append(eligible[-1] and event.metadata_id in sixteen)
        self.spans: Intervals = (np.array(begins, np.int64), np.array(ends, np.int64))
        self.kinds = np.array(kind_of, dtype=object)
        self.eligible = np.array(eligible, dtype=bool)
        self.sixteen_bit = np.array(low, dtype=bool)  # matmuls and convolutions in 16 bits


def _kind(name: str) -> str:
    copy = COPY_EVENT.match(name)
    if copy:
        return COPY_DIRECTION.get(copy.group(1) or "", "d2d")
    if name.startswith("Memset"):
        return "memset"
    return "tensor_core" if TENSOR_CORE_KERNEL.search(name) else "kernel"


def _eligible_op(event: Any, op_stat_ids: set[int], names: PlaneNames) -> bool:
    for stat in event.stats:
        if stat.metadata_id in op_stat_ids:
            op = str(names.value(stat) or "")
            return bool(TENSOR_CORE_OPS.search(op.rsplit(":", 1)[-1]))
    return False


def _device(
    plane: Any,
    streams: _Streams,
    start: int,
    end: int,
    host_busy: dict[HostActivity, Intervals],
    prefix: str,
) -> GpuDevice:
    window = max(end - start, 1)
    figures = PlaneNames(plane).stat_dict(plane.stats)
    begins, ends = streams.spans
    durations = ends - begins
    kinds = streams.kinds
    kernel = (kinds == "kernel") | (kinds == "tensor_core")
    kernel_us = durations[kernel] / 1e3
    busy = _union(begins, ends)
    idle = _complement(busy, start, end)
    idle_while = {}
    covered: Intervals = (_EMPTY, _EMPTY)
    for act in PRIORITY:
        part = _subtract(_intersect(idle, host_busy[act]), covered)
        idle_while[act.value] = _share(_length(part), window)
        covered = _union(
            np.concatenate([covered[0], part[0]]), np.concatenate([covered[1], part[1]])
        )
    idle_while[HostActivity.NOTHING.value] = _share(_length(_subtract(idle, covered)), window)
    cc = _compute_capability(figures)
    memory = _as_int(figures.get("memory_size"))
    sms = _as_int(figures.get("core_count"))
    bandwidth = figures.get("memory_bandwidth")
    clock = figures.get("clock_rate")

    def copy_ms(kind: str) -> float:
        return round(float(durations[kinds == kind].sum()) / 1e6, 3)

    return GpuDevice(
        device=plane.name if not prefix else f"{prefix}{plane.name}",
        host=prefix,
        vendor=vendor_of(figures),
        model=model_name(cc, sms, memory, figures),
        compute_capability=cc,
        sm_count=sms,
        memory_bytes=memory,
        memory_bandwidth_gbps=round(float(bandwidth) / 1e9, 1) if bandwidth else None,
        clock_mhz=round(float(clock) / 1e3, 1) if clock else None,
        window_ms=round(window / 1e6, 3),
        busy_share=_share(_length(busy), window),
        kernel_share=_share(_length(_union(begins[kernel], ends[kernel])), window),
        idle_share=round(1 - _share(_length(busy), window), 3),
        copies=GpuCopies(
            host_to_device_ms=copy_ms("h2d"),
            device_to_host_ms=copy_ms("d2h"),
            device_to_device_ms=copy_ms("d2d"),
        ),
        kernels=GpuKernels(
            count=int(kernel.sum()),
            total_ms=round(float(kernel_us.sum()) / 1e3, 3),
            median_us=round(float(np.median(kernel_us)), 2) if len(kernel_us) else None,
            short_share=round(float((kernel_us < SHORT_KERNEL_US).mean()), 3)
            if len(kernel_us)
            else 0.0,
            tensor_core_eligible_ms=round(float(durations[streams.eligible].sum()) / 1e6, 3),
            tensor_core_ms=copy_ms("tensor_core"),
            sixteen_bit_ms=round(float(durations[streams.sixteen_bit].sum()) / 1e6, 3),
        ),
        busy_timeline_share=_timeline(busy, start, window),
        idle_while_host_share=idle_while,
    )


def _compute_capability(figures: dict[str, Any]) -> str | None:
    major, minor = figures.get("compute_cap_major"), figures.get("compute_cap_minor")
    if major is None:
        return None
    return f"{int(major)}.{int(minor or 0)}"


def _as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value else None


def _host_lane(busy: dict[HostActivity, Intervals], start: int, window: int) -> HostLane:
    """The host's activity slice by slice, each activity counted where no earlier one in
    PRIORITY covers it; `nothing` where less than a tenth of the slice was traced work."""
    exclusive: dict[HostActivity, Intervals] = {}
    covered: Intervals = (_EMPTY, _EMPTY)
    for act in PRIORITY:
        exclusive[act] = _subtract(busy[act], covered)
        covered = _merge(covered, exclusive[act])
    per_slice = np.array([_timeline(exclusive[act], start, window) for act in PRIORITY])
    best = per_slice.argmax(axis=0)
    activity = [
        PRIORITY[i] if per_slice[i, n] >= 0.1 else HostActivity.NOTHING for n, i in enumerate(best)
    ]
    return HostLane(
        host="",
        window_ms=round(window / 1e6, 3),
        slice_ms=round(window / SLICES / 1e6, 3),
        activity=activity,
        busy_share={act.value: _share(_length(exclusive[act]), window) for act in PRIORITY},
    )


# Intervals: (starts, ends) arrays; the functions below return them sorted and disjoint.


def _union(begins: np.ndarray, ends: np.ndarray) -> Intervals:
    if not len(begins):
        return _EMPTY, _EMPTY
    order = np.argsort(begins, kind="stable")
    b, e = begins[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(b), dtype=bool)
    new[1:] = b[1:] > reach[:-1]
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:] - 1, len(b) - 1)
    return b[firsts], reach[lasts]


def _merge(a: Intervals, b: Intervals) -> Intervals:
    return _union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    """Where both of two sorted, disjoint sets of intervals are: count the sets covering each
    point (starts +1, ends -1) and keep the stretches covered by both."""
    if not len(a[0]) or not len(b[0]):
        return _EMPTY, _EMPTY
    points = np.concatenate([a[0], b[0], a[1], b[1]])
    steps = np.concatenate(
        [np.ones(len(a[0]) + len(b[0]), np.int64), -np.ones(len(a[1]) + len(b[1]), np.int64)]
    )
    order = np.lexsort((steps, points))  # at one instant, ends before starts
    points, depth = points[order], np.cumsum(steps[order])
    inside = depth == 2
    begins = points[:-1][inside[:-1]]
    ends = points[1:][inside[:-1]]
    keep = ends > begins
    return begins[keep], ends[keep]


def _complement(spans: Intervals, start: int, end: int) -> Intervals:
    begins = np.concatenate([[start], spans[1]])
    ends = np.concatenate([spans[0], [end]])
    begins, ends = np.maximum(begins, start), np.minimum(ends, end)
    keep = ends > begins
    return begins[keep], ends[keep]


def _subtract(a: Intervals, b: Intervals) -> Intervals:
    if not len(b[0]) or not len(a[0]):
        return a
    return _intersect(a, _complement(b, int(min(a[0][0], b[0][0])), int(max(a[1][-1], b[1][-1]))))


def _length(spans: Intervals) -> int:
    return int((spans[1] - spans[0]).sum())


def _share(part: float, whole: float) -> float:
    return round(part / whole, 3) if whole else 0.0


def _timeline(spans: Intervals, start: int, window: int) -> list[float]:
    """The share (0-1) of each of SLICES equal slices of the window that the (sorted, disjoint)
    `spans` cover: the covered time up to each slice's edge, differenced."""
    edges = start + np.arange(SLICES + 1) * (window / SLICES)
    begins, ends = spans
    if not len(begins):
        return [0.0] * SLICES
    before = np.concatenate([[0], np.cumsum(ends - begins)])
    i = np.searchsorted(ends, edges, side="right")  # intervals wholly before each edge
    partial = np.clip(edges - begins[np.minimum(i, len(begins) - 1)], 0, None)
    partial = np.where(
        i < len(begins), np.minimum(partial, (ends - begins)[np.minimum(i, len(begins) - 1)]), 0
    )
    covered = before[i] + partial
    shares = np.diff(covered) / (window / SLICES)
    return [round(float(min(1.0, max(0.0, v))), 3) for v in shares]
