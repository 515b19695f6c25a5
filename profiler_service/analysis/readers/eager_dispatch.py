"""Ops run eagerly inside the training steps, and what a graph would keep of them.

XProf reports the eager share of host op time only on GPU captures; on a CPU its op stats hold
nothing for eager ops. The capture's own events do: each op run from Python leaves its entry
(`TFE_Py_FastPathExecute_C`, `EagerExecute`, `convert_to_tensor`, `tf.constant`), the op
(`EagerLocalExecute: MatMul`) and its kernel's run (`KernelAndDeviceFunc::Run`). Within the
marked steps this reads, per step, the ops run eagerly, the time in their dispatch and the time
in their kernels, leaving out tf.function calls (`EagerLocalExecute: __inference_...`), which
are graphs already. A step with no tf.function call is eager throughout: a tf.function would
keep its kernels and drop the Python around them too.
"""

from __future__ import annotations

from bisect import bisect_right

from profiler_service.analysis.models import EagerDispatch
from profiler_service.analysis.readers.host_events import EAGER_OP_PREFIX, HostEvents, Span

_FUNCTION_OPS = ("__inference_", "__forward_", "__backward_", "PartitionedCall")

Ranges = list[tuple[int, int]]


def read_eager_dispatch(events: HostEvents) -> EagerDispatch | None:
    """Per marked step, the eager ops' count, dispatch and kernel time; None without any."""
    steps = _union([(s.start_ps, s.end_ps) for s in events.steps])
    if not steps or not events.eager_ops:
        return None
    functions = [s for s in events.eager_ops if _is_function(s)]
    ops = [s for s in events.eager_ops if not _is_function(s)]
    in_functions = _union([(s.start_ps, s.end_ps) for s in functions])
    eager_ops = sum(1 for s in ops if _inside(s, steps) and not _inside(s, in_functions))
    if eager_ops == 0:
        return None

    def eager_time(spans: list[Span]) -> float:
        ranges = _union([(s.start_ps, s.end_ps) for s in spans])
        return _length(_minus(_intersect(ranges, steps), in_functions))

    count = len(events.steps)
    step_ps = _length(steps)
    per_step = 1e9 * count  # ps -> ms per step
    return EagerDispatch(
        steps=count,
        step_ms=round(step_ps / per_step, 4),
        ops_per_step=round(eager_ops / count, 2),
        dispatch_ms_per_step=round(eager_time(events.eager_entries + ops) / per_step, 4),
        kernel_ms_per_step=round(eager_time(events.eager_kernels) / per_step, 4),
        in_tf_function=bool(functions) and any(_inside(s, steps) for s in functions),
    )


def _is_function(span: Span) -> bool:
    op = span.name.removeprefix(EAGER_OP_PREFIX)
    return op.startswith(_FUNCTION_OPS) or op.endswith(_FUNCTION_OPS)


def _union(ranges: Ranges) -> Ranges:
    merged: Ranges = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    found, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            found.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return found


def _minus(a: Ranges, b: Ranges) -> Ranges:
    if not b:
        return a
    found = []
    for start, end in a:
        cursor = start
        for s, e in b:
            if e <= cursor or s >= end:
                continue
            if s > cursor:
                found.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < end:
            found.append((cursor, end))
    return found


def _length(ranges: Ranges) -> int:
    return sum(end - start for start, end in ranges)


def _inside(span: Span, ranges: Ranges) -> bool:
    """Whether `span` lies within one of `ranges` (merged, in order): a bisection, as a
    capture holds a hundred thousand eager ops and hundreds of steps."""
    i = bisect_right(ranges, (span.start_ps, float("inf"))) - 1
    return i >= 0 and span.end_ps <= ranges[i][1]
