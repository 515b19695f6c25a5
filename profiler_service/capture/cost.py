"""What a capture cost the job: its step time while the trace ran against its step time just
before, read from the step timings the job already reports.

- The in-process agent (and any job whose sidecar samples the agent's step timings): the
  look-back ring's `step_time_ms` and `steps_per_s` samples, each one over the interval before
  it. Samples that end by the trace's start, over the `BEFORE_MIN_S` (or twice the trace) before
  it, give "before" (at least `MIN_SAMPLES_BEFORE` of them, looking further back for slow steps;
  fewer, as when the job has just started, compare nothing); samples whose interval lies inside
  the trace give "during". A step's time
  is the wall time over the steps the markers counted: what the job pays, the time between its
  markers included (a trace slows the callbacks and Python there too: on 3 ms Keras steps the
  marked time alone read 1.15x where the job's throughput fell 1.47x).
- A sidecar whose job exports the step metrics to Prometheus: the lead-up's `step_time_ms` query
  (a one-minute rate) just before the trace, against the trace's own steps (XProf's step time):
  `prometheus+trace`, rougher, said so.
- Neither: unknown, and the note gives the true cause the look-back recorded
  (`LeadUp.missing`): a job that marks no steps, or a sidecar that does not read the job's step
  timings (they live in the job's process: PROFILER_JOB_METRICS_URL reads them from the job's
  `/metrics`), with what to do.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from datetime import datetime

from profiler_service.lookback.models import LeadUp, Series
from profiler_service.models import CaptureCost, Snapshot

__all__ = ["BEFORE_MIN_S", "COSTLY_RATIO", "MIN_SAMPLES_BEFORE", "capture_cost", "snapshot_cost"]

BEFORE_MIN_S = 10.0  # at least this long before the trace, or twice the trace when longer
# "Before" is the median of at least this many samples: one or two may be the job's first steps,
# which trace and compile its functions (the demo's first step took 1,000 ms, its next 83 ms).
MIN_SAMPLES_BEFORE = 3
# A capture that slowed the job's steps by this much or more says how to make it cheaper.
COSTLY_RATIO = 1.10
COSTLY_ADVICE = (
    "the trace slowed the job's steps by {pct:.0%} ({step:g} ms steps): cheaper captures are "
    "shorter, or from a sidecar with `include_dataset_ops=false` (docs/performance.md, Cost "
    "to the job)"
)
# A sample counts as "during" when at least this share of its interval lies inside the trace;
# those wholly inside (to the sampler's jitter) alone where there are any.
DURING_MIN_OVERLAP = 0.5
WHOLLY_INSIDE = 0.98

# Where the look-back recorded no reason (a snapshot from before it did).
UNKNOWN = "unknown: no step timings of the job were read during the look-back"
NO_LOOKBACK = (
    "unknown: nothing reads the job's step timings (PROFILER_LOOKBACK_S=0 and no "
    "PROFILER_PROMETHEUS_URL)"
)


def snapshot_cost(snapshot: Snapshot) -> CaptureCost | None:
    """What a finished snapshot's trace cost its job; None before its trace ran."""
    if snapshot.capture_started_at is None or snapshot.capture_finished_at is None:
        return None
    steps = snapshot.summary.step_time if snapshot.summary else None
    return capture_cost(
        snapshot.lead_up,
        snapshot.capture_started_at,
        snapshot.capture_finished_at,
        steps.avg_ms if steps else None,
        steps.count if steps else 0,
    )


def capture_cost(
    lead_up: LeadUp | None,
    started: datetime,
    finished: datetime,
    trace_step_ms: float | None = None,
    trace_steps: int = 0,
) -> CaptureCost:
    cost = _measured(lead_up, started, finished, trace_step_ms, trace_steps)
    if cost.ratio is not None and cost.ratio >= COSTLY_RATIO and cost.step_ms_before:
        advice = COSTLY_ADVICE.format(pct=cost.ratio - 1, step=round(cost.step_ms_before, 1))
        cost.note = f"{cost.note}; {advice}" if cost.note else advice
    return cost


def _measured(
    lead_up: LeadUp | None,
    started: datetime,
    finished: datetime,
    trace_step_ms: float | None,
    trace_steps: int,
) -> CaptureCost:
    start, end = started.timestamp(), finished.timestamp()
    series = {(s.name, s.source == "prometheus"): s for s in (lead_up.series if lead_up else [])}
    own = series.get(("step_time_ms", False))
    if own is not None and own.points:
        return _from_samples(own, series.get(("steps_per_s", False)), start, end)
    rate = series.get(("step_time_ms", True))
    before = [v for t, v in rate.points if t <= start] if rate else []
    if before and trace_step_ms:
        ratio = trace_step_ms / before[-1] if before[-1] > 0 else None
        return CaptureCost(
            step_ms_before=round(before[-1], 3),
            step_ms_during=round(trace_step_ms, 3),
            ratio=round(ratio, 4) if ratio else None,
            steps_during=trace_steps,
            source="prometheus+trace",
            note="before: Prometheus's one-minute rate of the job's step timings; during: the "
            "trace's own steps (XProf): a rough figure",
        )
    return CaptureCost(note=_unknown(lead_up, rate, trace_step_ms))


def _unknown(lead_up: LeadUp | None, rate: Series | None, trace_step_ms: float | None) -> str:
    """Why no cost: the cause the look-back recorded, not a guess."""
    if lead_up is None:
        return NO_LOOKBACK
    if rate is not None and rate.points:
        if not trace_step_ms:
            return "unknown: the trace holds no step to set against Prometheus's step time"
        return "unknown: Prometheus's step time has no point before the trace"
    why = lead_up.missing.get("step_time_ms")
    return f"unknown: {why}" if why else UNKNOWN


def _from_samples(times: Series, counts: Series | None, start: float, end: float) -> CaptureCost:
    """Before: the samples of the window up to the trace's start; during: those whose interval
    lies mostly inside it. With the step counts, a step's time is the wall time the samples span
    over the steps they counted (what the job pays, between the markers too: callbacks, Python,
    the next batch's fetch); before, the median sample's, which a pause (an evaluation, a
    checkpoint) does not move. Without them, the marked steps' own mean."""
    gaps = [b - a for a, b in itertools.pairwise(t for t, _ in times.points) if b > a]
    typical = statistics.median(gaps) if gaps else 1.0
    steps_at = dict(counts.points) if counts else {}
    window = max(BEFORE_MIN_S, 2 * (end - start))
    earlier: list[tuple[float, _Sample]] = []  # every sample ending by the trace's start
    during: list[tuple[float, _Sample]] = []
    previous: float | None = None
    for t, ms in times.points:
        interval = t - previous if previous is not None and t > previous else typical
        previous = t
        steps = steps_at.get(t, 1.0)
        if steps <= 0:
            continue
        sample = _Sample(ms, steps, interval if counts else None)
        inside = max(0.0, min(t, end) - max(t - interval, start)) / interval
        if t <= start:
            earlier.append((t, sample))
        elif inside >= DURING_MIN_OVERLAP:
            during.append((inside, sample))
    # Wholly inside where any is: the others' steps are partly untraced.
    whole = [x for inside, x in during if inside >= WHOLLY_INSIDE]
    during_samples = whole or [x for _, x in during]
    before = [x for t, x in earlier if t > start - window]
    if len(before) < MIN_SAMPLES_BEFORE:  # slow steps: as far back as that many samples go
        before = [x for _, x in earlier[-MIN_SAMPLES_BEFORE:]]
    cost = CaptureCost(source=times.source)
    if 0 < len(before) < MIN_SAMPLES_BEFORE:
        return _too_few_before(cost, before, during_samples)
    if before:
        cost.steps_before = round(sum(x.steps for x in before))
        cost.step_ms_before = _typical(before)
    if during_samples:
        cost.steps_during = round(sum(x.steps for x in during_samples))
        cost.step_ms_during = _overall(during_samples)
    if cost.step_ms_before and cost.step_ms_during is not None:
        cost.ratio = round(cost.step_ms_during / cost.step_ms_before, 4)
    elif not before:
        cost.note = "no step ended in the seconds before the trace: nothing to compare with"
    else:
        cost.note = "no step ended while the trace ran (a step longer than the capture?)"
    if cost.ratio is not None and not counts:
        cost.note = "the marked steps' own time, not the wall time between them (no step counts)"
    return cost


def _too_few_before(cost: CaptureCost, before: list[_Sample], during: list[_Sample]) -> CaptureCost:
    """What can be said where too few steps ended before the trace: the traced steps' time."""
    steps = round(sum(x.steps for x in before))
    cost.note = (
        f"only {steps:,} step{'s' if steps != 1 else ''} ended before the trace (a job's first "
        "steps trace and compile): too few to compare with"
    )
    if during:
        cost.steps_during = round(sum(x.steps for x in during))
        cost.step_ms_during = _overall(during)
        cost.note += (
            f"; {round(cost.step_ms_during, 1):g} ms a step while traced "
            f"({cost.steps_during:,} steps)"
        )
    return cost


@dataclass(frozen=True)
class _Sample:
    marked_ms: float  # the mean of the steps the markers timed in the sample's interval
    steps: float
    interval_s: float | None  # None: the steps were not counted, only timed

    @property
    def wall_ms(self) -> float:
        if self.interval_s is None:
            return self.marked_ms
        return 1000 * self.interval_s / self.steps


def _overall(samples: list[_Sample]) -> float:
    """Every step weighs the same: the wall time over the steps, or the marked mean."""
    steps = sum(x.steps for x in samples)
    if samples[0].interval_s is None:
        return round(sum(x.marked_ms * x.steps for x in samples) / steps, 3)
    return round(1000 * sum(x.interval_s or 0.0 for x in samples) / steps, 3)


def _typical(samples: list[_Sample]) -> float:
    """The job's usual step: the median sample's wall time a step, or the marked mean."""
    if samples[0].interval_s is None:
        return _overall(samples)
    return round(statistics.median(x.wall_ms for x in samples), 3)
