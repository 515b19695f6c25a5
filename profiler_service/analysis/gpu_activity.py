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

import mmap
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from profiler_service.analysis.models import (
    GpuActivity,
    GpuCopies,
    GpuDevice,
    GpuKernels,
    HostActivity,
    HostLane,
)
from profiler_service.analysis.xplane import GPU_PLANE_PREFIX, HOST_PLANE, PlaneNames, read_xspace

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
PRIORITY = (HostActivity.INPUT, HostActivity.TF_OPS, HostActivity.PYTHON, HostActivity.TF_DATA)

# The step asking tf.data for its next element; what runs inside it is the input's too.
_GET_NEXT = re.compile(r"IteratorGetNext|MultiDeviceIteratorGetNext")
# tf.data's own work, on its threads or named by its iterators.
_TF_DATA = re.compile(
    r"^(Iterator::|ParallelMap|Prefetch|MapAndBatch|ParallelInterleave|ParallelBatch"
    r"|InstantiatedCapturedFunction)"
)
# Events that only enclose others while the thread waits for them: a tf.function call, a
# step marker, the executor's loop, a synchronisation with the device.
_ENCLOSING_NAMES = re.compile(
    r"^(TFE_Py_Execute|EagerExecute|EagerLocalExecute|EagerKernelExecute|FunctionRun"
    r"|ExecutorState::Process|TraceContext|cuStreamSynchronize|cudaStreamSynchronize"
    r"|cuCtxSynchronize|cuEventSynchronize|TensorHandle::.*WaitReady|.*::Wait$)"
)
_STEP_NAMES = frozenset(
    {"train", "test", "predict", "train_function", "test_function", "predict_function"}
)
_OP_EVENT = re.compile(r"^[^\s:]+:[A-Za-z_][\w]*$")  # "model/dense/MatMul:MatMul"
_TENSOR_CORE_OPS = re.compile(
    r"(MatMul|Conv\d?D|Conv2DBackprop|Conv3DBackprop|Einsum|CudnnRNN|dot|convolution|gemm|Gemm)"
)
# cuBLAS/cuDNN/CUTLASS kernels that run on Tensor Cores name their MMA shape or path.
_TENSOR_CORE_KERNEL = re.compile(
    r"(884|1688|16816|hmma|HMMA|tensorop|xmma|wmma|_tc_|s16816|h16816|bf16816|tf32|cutlass.*mma"
    r"|sm\d\d_xmma|gmma|nvjet)"
)
_COPY = re.compile(r"^Memcpy(H2D|D2H|D2D|P2P|DtoD|HtoD|DtoH|PtoP)?")

# Known GPUs: (compute capability, SMs, memory in GiB on the box) -> name. The plane gives the
# usable memory, a little under the nominal size; a name is given only where one GPU matches.
KNOWN_GPUS: tuple[tuple[str, str, int, int], ...] = (
    ("Tesla K80", "3.7", 13, 12),
    ("Tesla P4", "6.1", 20, 8),
    ("GeForce GTX 1080", "6.1", 20, 8),
    ("GeForce GTX 1080 Ti", "6.1", 28, 11),
    ("Tesla P100-16GB", "6.0", 56, 16),
    ("Tesla P100-12GB", "6.0", 56, 12),
    ("Tesla V100-16GB", "7.0", 80, 16),
    ("Tesla V100-32GB", "7.0", 80, 32),
    ("Titan V", "7.0", 80, 12),
    ("Tesla T4", "7.5", 40, 16),
    ("GeForce RTX 2060", "7.5", 30, 6),
    ("GeForce RTX 2070", "7.5", 36, 8),
    ("GeForce RTX 2080", "7.5", 46, 8),
    ("GeForce RTX 2080 Ti", "7.5", 68, 11),
    ("Quadro RTX 6000/8000", "7.5", 72, 24),
    ("A100-40GB", "8.0", 108, 40),
    ("A100-80GB", "8.0", 108, 80),
    ("A30", "8.0", 56, 24),
    ("A10", "8.6", 72, 24),
    ("A40", "8.6", 84, 48),
    ("GeForce RTX 3080", "8.6", 68, 10),
    ("GeForce RTX 3090", "8.6", 82, 24),
    ("L4", "8.9", 58, 24),
    ("L40S", "8.9", 142, 48),
    ("GeForce RTX 4090", "8.9", 128, 24),
    ("H100 SXM", "9.0", 132, 80),
    ("H100 PCIe", "9.0", 114, 80),
    ("H200", "9.0", 132, 141),
)
MEMORY_USABLE_SHARE = 0.85  # usable memory is at least this share of the nominal size


def has_gpu_planes(xplane: Path) -> bool:
    """Whether the capture names a GPU plane (a byte scan: milliseconds for 30 MB)."""
    try:
        with xplane.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(GPU_PLANE_PREFIX.encode()) != -1
    except (OSError, ValueError):
        return False


def read_gpu_activity(paths: list[Path]) -> GpuActivity | None:
    """Every GPU of every host file; None when no file has a GPU plane."""
    activity = GpuActivity(slices=SLICES)
    for path in paths:
        if not has_gpu_planes(path):
            continue
        host = path.name.removesuffix(".xplane.pb")
        devices, lane = _read_host(read_xspace(path), host if len(paths) > 1 else "")
        activity.devices.extend(devices)
        if lane is not None:
            lane.host = host
            activity.hosts.append(lane)
    return activity if activity.devices else None


def _read_host(space: Any, prefix: str) -> tuple[list[GpuDevice], HostLane | None]:
    gpu_planes = sorted(
        (p for p in space.planes if p.name.startswith(GPU_PLANE_PREFIX)),
        key=lambda p: _device_number(p.name),
    )
    host_plane = next((p for p in space.planes if p.name == HOST_PLANE), None)
    streams = {p.name: _stream_events(p) for p in gpu_planes}
    host_self = _host_self_time(host_plane) if host_plane is not None else {}
    spans = [(s, e) for events in streams.values() for s, e, _, _ in events]
    spans += [iv for ivs in host_self.values() for iv in ivs]
    if not spans:
        return [], None
    start = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    window = max(end - start, 1)
    host_busy = {act: _union(host_self.get(act, [])) for act in PRIORITY}
    devices = [
        _device(plane, streams[plane.name], start, end, host_busy, prefix) for plane in gpu_planes
    ]
    return devices, _host_lane(host_busy, start, window)


def _device_number(name: str) -> int:
    tail = name.removeprefix(GPU_PLANE_PREFIX)
    return int(tail) if tail.isdigit() else 0


def _stream_events(plane: Any) -> list[tuple[int, int, str, dict[str, Any]]]:
    """(start ns, end ns, name, stats) of each kernel, copy and memset on the device's streams."""
    names = PlaneNames(plane)
    events = []
    for line in plane.lines:
        if line.name in DERIVED_LINES or line.id < 0:
            continue
        base = line.timestamp_ns * 1000
        for event in line.events:
            if event.duration_ps <= 0:
                continue
            begin = (base + event.offset_ps) // 1000
            events.append(
                (
                    begin,
                    begin + max(event.duration_ps // 1000, 1),
                    names.events.get(event.metadata_id, ""),
                    names.stat_dict(event.stats),
                )
            )
    return events


def _device(
    plane: Any,
    events: list[tuple[int, int, str, dict[str, Any]]],
    start: int,
    end: int,
    host_busy: dict[HostActivity, list[tuple[int, int]]],
    prefix: str,
) -> GpuDevice:
    window = max(end - start, 1)
    figures = PlaneNames(plane).stat_dict(plane.stats)
    copies = GpuCopies()
    kernel_spans, all_spans, durations_us = [], [], []
    eligible_ns = tensor_core_ns = 0
    for begin, finish, name, stats in events:
        all_spans.append((begin, finish))
        copy = _COPY.match(name)
        if copy:
            direction = (copy.group(1) or "").replace("to", "2").replace("Pto", "P2")
            ms = (finish - begin) / 1e6
            if direction == "H2D":
                copies.host_to_device_ms += ms
            elif direction == "D2H":
                copies.device_to_host_ms += ms
            else:
                copies.device_to_device_ms += ms
            continue
        if name.startswith("Memset"):
            continue
        kernel_spans.append((begin, finish))
        durations_us.append((finish - begin) / 1e3)
        op = str(stats.get("tf_op") or stats.get("level 0") or stats.get("annotation") or "")
        if _TENSOR_CORE_OPS.search(op.rsplit(":", 1)[-1]) or _TENSOR_CORE_KERNEL.search(name):
            eligible_ns += finish - begin
            if _TENSOR_CORE_KERNEL.search(name):
                tensor_core_ns += finish - begin
    busy = _union(all_spans)
    idle = _complement(busy, start, end)
    idle_while = {}
    covered: list[tuple[int, int]] = []
    for act in PRIORITY:
        part = _subtract(_intersect(idle, host_busy[act]), covered)
        idle_while[act.value] = _pct(_length(part), window)
        covered = _union(covered + part)
    idle_while[HostActivity.NOTHING.value] = _pct(_length(_subtract(idle, covered)), window)
    cc = _compute_capability(figures)
    memory = _as_int(figures.get("memory_size"))
    sms = _as_int(figures.get("core_count"))
    bandwidth = figures.get("memory_bandwidth")
    clock = figures.get("clock_rate")
    device = plane.name if not prefix else f"{prefix}{plane.name}"
    return GpuDevice(
        device=device,
        host=prefix,
        model=_model_name(cc, sms, memory, figures),
        compute_capability=cc,
        sm_count=sms,
        memory_bytes=memory,
        memory_bandwidth_gbps=round(float(bandwidth) / 1e9, 1) if bandwidth else None,
        clock_mhz=round(float(clock) / 1e3, 1) if clock else None,
        window_ms=round(window / 1e6, 3),
        busy_pct=_pct(_length(busy), window),
        kernel_pct=_pct(_length(_union(kernel_spans)), window),
        idle_pct=round(100 - _pct(_length(busy), window), 1),
        copies=GpuCopies(**{k: round(v, 3) for k, v in copies.model_dump().items()}),
        kernels=GpuKernels(
            count=len(durations_us),
            total_ms=round(sum(durations_us) / 1e3, 3),
            median_us=round(statistics.median(durations_us), 2) if durations_us else None,
            short_share=round(sum(d < SHORT_KERNEL_US for d in durations_us) / len(durations_us), 3)
            if durations_us
            else 0.0,
            tensor_core_eligible_ms=round(eligible_ns / 1e6, 3),
            tensor_core_ms=round(tensor_core_ns / 1e6, 3),
        ),
        busy_timeline_pct=_timeline(busy, start, window),
        idle_while_host_pct=idle_while,
    )


def _compute_capability(figures: dict[str, Any]) -> str | None:
    major, minor = figures.get("compute_cap_major"), figures.get("compute_cap_minor")
    if major is None:
        return None
    return f"{int(major)}.{int(minor or 0)}"


def _model_name(
    cc: str | None, sms: int | None, memory: int | None, figures: dict[str, Any]
) -> str | None:
    for key in ("device_name", "gpu_name", "device_model"):
        if isinstance(figures.get(key), str) and figures[key]:
            return figures[key]
    if cc is None or sms is None or memory is None:
        return None
    gib = memory / 2**30
    matches = [
        name
        for name, known_cc, known_sms, nominal in KNOWN_GPUS
        if (known_cc, known_sms) == (cc, sms) and nominal * MEMORY_USABLE_SHARE <= gib <= nominal
    ]
    return matches[0] if len(matches) == 1 else None


def _as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value else None


def _classify(name: str, line: str, stats: dict[str, Any]) -> HostActivity | None:
    """A host event's own activity; None for one that only encloses others while it waits."""
    if _GET_NEXT.search(name):
        return HostActivity.INPUT
    if line.startswith("tf_data") or _TF_DATA.match(name):
        return HostActivity.TF_DATA
    if name.startswith("$"):  # the Python tracer
        return HostActivity.PYTHON
    if _ENCLOSING_NAMES.match(name) or name in _STEP_NAMES or "step_num" in stats:
        return None
    if _OP_EVENT.match(name) and stats.get("is_eager"):
        return HostActivity.PYTHON  # an op run eagerly: dispatched one by one from Python
    return HostActivity.TF_OPS


def _host_self_time(plane: Any) -> dict[HostActivity, list[tuple[int, int]]]:
    """Each host thread's time, assigned to its innermost event's activity; an event inside a
    tf.data one is input (a map function's ops, the input's copy to the device)."""
    names = PlaneNames(plane)
    stat_ids_of_interest = {k for k, v in names.stats.items() if v in ("step_num", "is_eager")}
    spans: dict[HostActivity, list[tuple[int, int]]] = defaultdict(list)
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        events = []
        for event in line.events:
            if event.duration_ps <= 0:
                continue
            begin = (base + event.offset_ps) // 1000
            stats = {
                names.stats[s.metadata_id]: names.value(s)
                for s in event.stats
                if s.metadata_id in stat_ids_of_interest
            }
            name = names.events.get(event.metadata_id, "")
            events.append((begin, begin + event.duration_ps // 1000, name, stats))
        events.sort(key=lambda e: (e[0], -e[1]))
        _self_time(events, line.name, spans)
    return spans


def _self_time(
    events: list[tuple[int, int, str, dict[str, Any]]],
    line: str,
    spans: dict[HostActivity, list[tuple[int, int]]],
) -> None:
    # Nested events (TraceMe scopes on one thread): a stack of [end, activity, cursor].
    stack: list[list[Any]] = []

    def emit(begin: int, finish: int, act: HostActivity | None) -> None:
        if act is not None and finish > begin:
            spans[act].append((begin, finish))

    def pop_until(time: int) -> None:
        while stack and stack[-1][0] <= time:
            finish, act, cursor = stack.pop()
            emit(cursor, finish, act)
            if stack:
                stack[-1][2] = max(stack[-1][2], finish)

    for begin, finish, name, stats in events:
        pop_until(begin)
        parent = stack[-1] if stack else None
        if parent is not None:
            emit(parent[2], begin, parent[1])
            finish = min(finish, parent[0])
        act = _classify(name, line, stats)
        if parent is not None and parent[1] in (HostActivity.INPUT, HostActivity.TF_DATA):
            act = parent[1]
        stack.append([finish, act, begin])
    pop_until(2**63)


def _host_lane(
    busy: dict[HostActivity, list[tuple[int, int]]], start: int, window: int
) -> HostLane:
    """The host's activity slice by slice: input first, then TF ops, then Python, as they
    explain a GPU's wait; `nothing` where less than a tenth of the slice was traced work."""
    exclusive: dict[HostActivity, list[tuple[int, int]]] = {}
    covered: list[tuple[int, int]] = []
    for act in PRIORITY:
        exclusive[act] = _subtract(busy[act], covered)
        covered = _union(covered + exclusive[act])
    per_slice = {act: _timeline(exclusive[act], start, window) for act in PRIORITY}
    activity = []
    for i in range(SLICES):
        shares = {act: per_slice[act][i] for act in PRIORITY}
        best = max(PRIORITY, key=lambda a: shares[a])
        activity.append(best if shares[best] >= 10 else HostActivity.NOTHING)
    return HostLane(
        host="",
        window_ms=round(window / 1e6, 3),
        slice_ms=round(window / SLICES / 1e6, 3),
        activity=activity,
        busy_pct={act.value: _pct(_length(exclusive[act]), window) for act in PRIORITY},
    )


# Intervals: sorted, disjoint (start, end) pairs in ns.


def _union(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for begin, finish in sorted(spans):
        if merged and begin <= merged[-1][1]:
            if finish > merged[-1][1]:
                merged[-1] = (merged[-1][0], finish)
        else:
            merged.append((begin, finish))
    return merged


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        begin, finish = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if begin < finish:
            out.append((begin, finish))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _complement(spans: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    out, cursor = [], start
    for begin, finish in spans:
        if begin > cursor:
            out.append((cursor, min(begin, end)))
        cursor = max(cursor, finish)
    if cursor < end:
        out.append((cursor, end))
    return out


def _subtract(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if not b:
        return a
    start = min(a[0][0], b[0][0]) if a else 0
    end = max(a[-1][1], b[-1][1]) if a else 0
    return _intersect(a, _complement(b, start, end))


def _length(spans: list[tuple[int, int]]) -> int:
    return sum(finish - begin for begin, finish in spans)


def _pct(part: float, whole: float) -> float:
    return round(100 * part / whole, 1) if whole else 0.0


def _timeline(spans: list[tuple[int, int]], start: int, window: int) -> list[float]:
    """The share (%) of each of SLICES equal slices of the window that `spans` cover."""
    width = window / SLICES
    covered = [0.0] * SLICES
    for begin, finish in spans:
        first = max(int((begin - start) / width), 0)
        last = min(int((finish - start) / width), SLICES - 1)
        for i in range(first, last + 1):
            lo = start + i * width
            covered[i] += max(0.0, min(finish, lo + width) - max(begin, lo))
    return [round(min(100.0, 100 * c / width), 1) for c in covered]
