"""Steps counted and timed per training step, when one marked call runs several of them.

Two things stand between a job's step markers and XProf's step table when one call of the train
function runs N steps (Keras `compile(steps_per_execution=N)`, or a custom `tf.function` looping
over batches):

- **The loop hides the markers.** The call's graph runs its steps in a `tf.while_loop`, and
  TensorFlow's executor stamps the loop's events with `iter_num`. XProf's grouping
  (`EventForest::ProcessTensorFlowLoop`) then takes the loop's iterations as the steps instead
  of the marked calls, and on a CPU capture yields none at all: 0 steps, no breakdown, no
  input-bound verdict (measured: Keras 3, N=4, 211 markers in the capture, 0 steps; any
  `tf.while_loop` under a marker does the same). `unhide_markers_in_loops` sets those iteration
  numbers to 0 before XProf reads the capture, only where the capture holds root step markers
  (`_r`), so XProf groups by the markers; the events keep their loop's `step_id`, so what runs
  inside (the input wait, `IteratorGetNextAsOptional`) still lands in the call's step.
- **A marked step is N training steps.** The markers number calls by their first training step
  (Keras 2's own and `ProfilerStepCallback` alike: 0, N, 2N, ...), and XProf names each row
  `"train <step_num>"`, so `per_training_step` reads N from the gap and divides.

- **A marker need not hold the whole step.** Keras 2's `fit()` marks the call of the train
  function, and its own loop's Python between calls (the data handler, `Trace`'s own entry) runs
  outside every marker: measured on a Keras 2 job of 2.8 ms steps, 0.2 ms of each step, so
  XProf's table said 2.6 ms where the job's clock said 2.82. `add_time_between_markers` reads
  the markers' own start times and adds the time from one marked step's end to the next's start
  as `between_steps_ms`, so the time per step is the job's own.

XProf also sets aside the first and last marked steps of a capture that has more than
`XPROF_KEEPS_ALL_UP_TO` (they may be cut short); the markers of a host capture are whole, so the
count adds them back, to agree with the steps the job ran while it was captured.

The capture's fields are declared here (proto_subset.py), so the sidecar needs no TensorFlow.
"""

from __future__ import annotations

import os
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from profiler_service.analysis.models import StepBreakdown, StepTime
from profiler_service.analysis.readers.host_events import SPAN_TAIL_EVENTS, Span
from profiler_service.analysis.readers.xplane import (
    HOST_PLANE,
    CaptureFile,
    as_capture,
    file_contains,
)
from profiler_service.proto_subset import F, message_classes

# XProf drops the first and last step only when it found more than this many
# (step_events_to_steps_db.cc: kDropIncomplteteStepThreshold).
XPROF_KEEPS_ALL_UP_TO = 5
# Time between marked steps under this share of XProf's average is left out: rounding and noise.
MIN_BETWEEN_SHARE = 0.01
# A gap between step numbers counts as "N steps per marker" only when at least this share of the
# consecutive markers agree on it; otherwise the numbering is the user's own (N = 1).
MIN_GAP_AGREEMENT = 0.5

# TF's thread-pool tracer's events, which it records on after the host tracer stopped.
THREAD_POOL_EVENTS = "ThreadpoolListener::"
ITER_NUM = "iter_num"  # TF executor's loop iteration stat (xplane_schema: kIterNum)
ROOT = "_r"  # a root (step) marker's stat: Trace(..., _r=1)
EXAMPLES = "examples"  # the examples a training step takes: Trace(..., examples=32)
_ROW = re.compile(r"^(?P<name>.*?)\s*(?P<num>-?\d+)$")

_OUTLINE_FIELDS = {
    "XSpace": [("planes", 1, F.TYPE_MESSAGE, True, "XPlane")],
    "XPlane": [
        ("name", 2, F.TYPE_STRING, False, None),
        ("stat_metadata", 5, F.TYPE_MESSAGE, True, "XPlane.StatMetadataEntry"),
        ("stats", 6, F.TYPE_MESSAGE, True, "XStat"),
    ],
    "XStat": [
        ("metadata_id", 1, F.TYPE_INT64, False, None),
        ("uint64_value", 3, F.TYPE_UINT64, False, None),
        ("int64_value", 4, F.TYPE_INT64, False, None),
    ],
    "XStatMetadata": [("name", 2, F.TYPE_STRING, False, None)],
}
_EVENT_FIELDS = {
    "XSpace": [("planes", 1, F.TYPE_MESSAGE, True, "XPlane")],
    "XPlane": [
        ("lines", 3, F.TYPE_MESSAGE, True, "XLine"),
        ("event_metadata", 4, F.TYPE_MESSAGE, True, "XPlane.EventMetadataEntry"),
        ("stat_metadata", 5, F.TYPE_MESSAGE, True, "XPlane.StatMetadataEntry"),
    ],
    "XLine": [("events", 4, F.TYPE_MESSAGE, True, "XEvent")],
    "XEvent": [
        ("metadata_id", 1, F.TYPE_INT64, False, None),
        ("stats", 4, F.TYPE_MESSAGE, True, "XStat"),
    ],
    "XStat": [
        ("metadata_id", 1, F.TYPE_INT64, False, None),
        ("uint64_value", 3, F.TYPE_UINT64, False, None),
        ("int64_value", 4, F.TYPE_INT64, False, None),
    ],
    "XEventMetadata": [("name", 2, F.TYPE_STRING, False, None)],
    "XStatMetadata": [("name", 2, F.TYPE_STRING, False, None)],
}
_MAPS = {
    "XPlane.EventMetadataEntry": (F.TYPE_INT64, "XEventMetadata"),
    "XPlane.StatMetadataEntry": (F.TYPE_INT64, "XStatMetadata"),
}


@cache
def _outline_space() -> Any:
    """An XSpace that parses the planes' own stats and stat names only: the lines stay unparsed
    bytes, so a 13 MB capture takes about 10 ms."""
    maps = {"XPlane.StatMetadataEntry": _MAPS["XPlane.StatMetadataEntry"]}
    return message_classes("profiler_service.xplane_outline", _OUTLINE_FIELDS, maps)["XSpace"]


@cache
def _event_space() -> Any:
    return message_classes("profiler_service.xplane_steps", _EVENT_FIELDS, _MAPS)["XSpace"]


def unhide_markers_in_loops(paths: Sequence[Path]) -> list[str]:
    """Rewrite captures whose loops would hide their step markers from XProf; notes on what was
    done. Run before any XProf tool reads the files (their op stats are cached beside them).

    A capture without loop events costs a byte scan; one with loops but no root markers is
    left to XProf's own loop grouping (a whole training loop in one graph has no markers).
    """
    notes = []
    rewritten: set[Path] = set()
    for path in paths:
        try:
            zeroed = _zero_loop_iterations(path)
        except (OSError, ValueError, DecodeError) as exc:  # unreadable: XProf will say why
            notes.append(f"step markers in {path.name} not checked for loops: {exc}")
            continue
        if zeroed:
            rewritten.add(path.parent)
            notes.append(
                f"{path.name}: the step markers enclose a tf.while_loop "
                "(steps_per_execution or a loop in the step), which XProf would have taken "
                f"as the steps; its {zeroed} iteration numbers were set to 0 so the markers "
                "define the steps"
            )
    for run_dir in rewritten:  # op stats XProf cached from the files as they were
        for cached in run_dir.glob("*.op_stats*.pb"):
            cached.unlink(missing_ok=True)
    return notes


def _zero_loop_iterations(path: Path) -> int:
    if not file_contains(path, ITER_NUM.encode()):
        return 0
    data = path.read_bytes()
    outline = _outline_space()()
    outline.ParseFromString(data)
    iter_ids = set()
    for plane in outline.planes:
        if _stat_ids(plane, ROOT):
            iter_ids |= _stat_ids(plane, ITER_NUM)
    if not iter_ids or not _loop_iteration_pattern(iter_ids).search(data):
        return 0  # no root markers, or every iteration number is 0 (no loop ran)
    space = _event_space()()
    space.ParseFromString(data)
    del data, outline
    zeroed = 0
    for plane in space.planes:
        iter_ids = _stat_ids(plane, ITER_NUM)
        if not iter_ids or not _stat_ids(plane, ROOT):
            continue
        for line in plane.lines:
            for event in line.events:
                for stat in event.stats:
                    if stat.metadata_id not in iter_ids:
                        continue
                    if stat.int64_value:  # keep the value's own field: XStat's is a oneof
                        stat.int64_value = 0
                        zeroed += 1
                    elif stat.uint64_value:
                        stat.uint64_value = 0
                        zeroed += 1
    if zeroed:
        staging = path.with_name(path.name + ".steps")
        staging.write_bytes(space.SerializeToString())
        os.replace(staging, path)
    return zeroed


def _loop_iteration_pattern(iter_ids: set[int]) -> re.Pattern[bytes]:
    """The bytes of an `iter_num` stat of 1 to 127 (an XStat: field 1 the metadata id, then the
    value as field 4, int64, or 3, uint64): a loop's second iteration writes one. A scan for it
    spares the parse of every event of the captures without loops (a one-step-per-call Keras
    job stamps `iter_num` 0 on all of its executor events); a chance match only costs that parse.
    """
    ids = b"|".join(re.escape(b"\x08" + _varint(i)) for i in sorted(iter_ids))
    return re.compile(b"(?:" + ids + b")[\x18\x20][\x01-\x7f]")


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _stat_ids(plane: Any, name: str) -> set[int]:
    return {key for key, meta in plane.stat_metadata.items() if meta.name == name}


def add_time_between_markers(step_time: StepTime, markers: Sequence[Span]) -> list[str]:
    """Add the time between consecutive marked steps to XProf's rows, in place; notes.

    Each row's time becomes its marker's start to the next marker's start (of the same name, with
    the next step number: an epoch's end or a marker left out is no step), when that is longer
    than XProf's; the difference goes to `between_steps_ms`. Run before `per_training_step`,
    which divides every figure by the training steps a marker holds.
    """
    if not step_time.steps or not step_time.avg_ms:
        return []
    gap = steps_per_marker(step_time)
    by_name: dict[str, list[Span]] = {}
    for span in markers:
        if span.stats.get(ROOT) and isinstance(span.stats.get("step_num"), int):
            by_name.setdefault(span.name, []).append(span)
    # (name, step number) -> start to the next marker's start, for each such marker in time order
    periods: dict[tuple[str, int], list[float | None]] = {}
    for name, spans in by_name.items():
        spans.sort(key=lambda s: s.start_ps)
        for span, following in zip(spans, [*spans[1:], None], strict=True):
            num = span.stats["step_num"]
            consecutive = following is not None and following.stats["step_num"] == num + gap
            period = (following.start_ps - span.start_ps) / 1e9 if consecutive else None
            periods.setdefault((name, num), []).append(period)
    added = []
    for sample in step_time.steps:
        match = _ROW.match(sample.name)
        found = periods.get((match["name"], int(match["num"]))) if match else None
        if not found:
            continue
        period_ms = found.pop(0)  # rows and markers both in time order
        extra = period_ms - sample.step_time_ms if period_ms is not None else 0.0
        if extra > 0:
            sample.step_time_ms = round(period_ms, 4)
            sample.breakdown.between_steps_ms = round(extra, 4)
            added.append(extra)
    if not added:
        return []
    between = sum(added) / len(step_time.steps)
    if between < MIN_BETWEEN_SHARE * step_time.avg_ms:
        for sample in step_time.steps:  # noise: XProf's figures as they were
            sample.step_time_ms = round(sample.step_time_ms - sample.breakdown.between_steps_ms, 4)
            sample.breakdown.between_steps_ms = 0.0
        return []
    share = 100 * between / (step_time.avg_ms + between)
    step_time.breakdown_avg.between_steps_ms = round(between, 4)
    step_time.avg_ms = round(step_time.avg_ms + between, 4)
    times = [s.step_time_ms for s in step_time.steps]
    step_time.min_ms, step_time.max_ms = min(times), max(times)
    return [
        f"{share:.0f}% of each marked step ran between the markers (the training loop's own "
        "Python, outside every marked step): added to the step time as between_steps_ms"
    ]


def read_examples_per_step(step_time: StepTime, markers: Sequence[Span]) -> None:
    """The examples a training step takes, as the step markers say (the median of their
    `examples` stat, profiler_service.steps.training_step), in place; left None where none
    says."""
    told = [
        span.stats[EXAMPLES]
        for span in markers
        if span.stats.get(ROOT) and isinstance(span.stats.get(EXAMPLES), int | float)
    ]
    if told:
        step_time.examples_per_step = float(statistics.median(told))


def per_training_step(step_time: StepTime, span_ms: float | None = None) -> list[str]:
    """Turn XProf's marked steps into training steps, in place; notes on what was read.

    N (`steps_per_marker`) is the gap most consecutive markers of one name agree on; times are
    divided by it. The count is the training steps run while the capture ran: the marked steps
    XProf timed, the first and last it set aside, and the steps of the calls the capture's start
    and end cut (at most one call at each end: the capture's span, `capture_span_ms`, over the
    time per call).
    """
    markers = step_time.count
    step_time.markers = markers
    if not markers or not step_time.avg_ms:
        return []
    if len(step_time.steps) == markers:  # every row kept: XProf's own figures are rounded
        times = [s.step_time_ms for s in step_time.steps]  # to 0.1 ms (5 % of a 2 ms step)
        step_time.avg_ms = round(sum(times) / markers, 4)
        step_time.min_ms, step_time.max_ms = min(times), max(times)
    per_marker = steps_per_marker(step_time)
    calls_in_span = span_ms / step_time.avg_ms if span_ms else 0.0
    whole = markers
    if markers > XPROF_KEEPS_ALL_UP_TO or (
        markers > XPROF_KEEPS_ALL_UP_TO - 2 and calls_in_span >= markers + 2
    ):
        whole = markers + 2  # XProf set the first and last aside
    count = whole * per_marker
    if calls_in_span:
        cut = round(calls_in_span * per_marker) - count
        count += min(max(cut, 0), 2 * per_marker)
    step_time.count = count
    step_time.steps_per_marker = per_marker
    if per_marker == 1:
        return []
    scale = 1 / per_marker
    for field in ("avg_ms", "min_ms", "max_ms", "stddev_ms"):
        value = getattr(step_time, field)
        if value is not None:
            setattr(step_time, field, round(value * scale, 4))
    step_time.breakdown_avg = _scaled(step_time.breakdown_avg, scale)
    for sample in step_time.steps:
        sample.step_time_ms = round(sample.step_time_ms * scale, 4)
        sample.breakdown = _scaled(sample.breakdown, scale)
    return [
        f"each marked step held {per_marker} training steps (steps_per_execution): the step "
        f"count and times are per training step ({markers} marked steps timed)"
    ]


def capture_span_ms(capture: CaptureFile | Path) -> float | None:
    """How long the profiler traced the job's steps: the capture's own `profile_start_time` to
    `profile_stop_time` (TF writes them on its "Task Environment" plane, in ns), less the end
    where only the thread-pool tracer still recorded.

    TF stops its tracers one after another: the thread pool's (`ThreadpoolListener::*` events)
    records on while the host tracer's events, step markers among them, are collected. On a
    small-step Keras 3 job captured for 2 s (TF 2.21), the markers stopped at 2.00 s and the stop
    time said 2.25 s, while the job ran 73 more steps.
    """
    try:
        capture = as_capture(capture)
        planes = capture.space().planes
    except (OSError, ValueError, DecodeError):
        return None
    for plane in planes:
        times = {
            plane.stat_metadata[stat.metadata_id].name: stat.uint64_value or stat.int64_value
            for stat in plane.stats
            if stat.metadata_id in plane.stat_metadata
        }
        start, stop = times.get("profile_start_time"), times.get("profile_stop_time")
        if start and stop and stop > start:
            return (stop - start - _untraced_tail_ps(capture.plane(HOST_PLANE)) / 1000) / 1e6
    return None


def _untraced_tail_ps(plane: Any) -> int:
    """How long the host plane's last events outlast its last event of another tracer than the
    thread pool's. Events are in start order on each line: each is read back from its end only
    as far as the latest such event found so far (a few thousand events, not the capture's)."""
    if plane is None:
        return 0
    pool = {k for k, m in plane.event_metadata.items() if m.name.startswith(THREAD_POOL_EVENTS)}

    def latest(events: Any, base: int, since: int) -> tuple[int, int]:
        last_any = last_traced = 0
        for event in reversed(events):
            start = base + event.offset_ps
            end = start + event.duration_ps
            last_any = max(last_any, end)
            if event.metadata_id not in pool:
                last_traced = max(last_traced, end)
            if start < since:
                break
        return last_any, last_traced

    tails = [(line.timestamp_ns * 1000, line.events) for line in plane.lines if line.events]
    # A first guess from each line's last events, then each line back to it.
    traced = max((latest(ev[-SPAN_TAIL_EVENTS:], b, 0)[1] for b, ev in tails), default=0)
    last_any = 0
    for base, events in tails:
        line_any, line_traced = latest(events, base, traced)
        last_any, traced = max(last_any, line_any), max(traced, line_traced)
    return max(0, last_any - traced) if traced else 0


def steps_per_marker(step_time: StepTime) -> int:
    """The gap between consecutive markers' step numbers that most of them share, or 1."""
    gaps: Counter[int] = Counter()
    previous: dict[str, int] = {}
    for sample in step_time.steps:
        match = _ROW.match(sample.name)
        if match is None:
            continue
        name, num = match["name"], int(match["num"])
        if name in previous:
            gaps[num - previous[name]] += 1
        previous[name] = num
    if not gaps:
        return 1
    gap, agreeing = gaps.most_common(1)[0]
    if gap < 1 or agreeing < MIN_GAP_AGREEMENT * sum(gaps.values()):
        return 1
    return gap


def _scaled(parts: StepBreakdown, scale: float) -> StepBreakdown:
    return StepBreakdown(
        **{name: round(value * scale, 4) for name, value in parts.model_dump().items()}
    )
