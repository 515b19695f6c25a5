"""Compare two analysed snapshots: what moved, in which direction, and is it a regression.

Pure functions over two Snapshots; the API, the report and the CI gate all call `compare()`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from profiler_service.across.capture_noise import between_captures_sd
from profiler_service.across.verification import step_change
from profiler_service.analysis.models import StepBreakdown
from profiler_service.analysis.renamed_fields import percent
from profiler_service.models import Snapshot
from profiler_service.verification_record import StepChange

# A top op counts as "grown" when its self time per step grows by more than this share...
OP_GROWTH_SHARE = 0.20
# ...and by at least this much, so noise in tiny ops is not reported.
OP_GROWTH_MIN_MS_PER_STEP = 0.05


class GateMetric(StrEnum):
    """What a CI gate may hold a snapshot to; each is 'lower is better'."""

    STEP_TIME = "step_time"
    INPUT_SHARE = "input_share"
    DEVICE_IDLE = "device_idle"
    MEMORY_PEAK = "memory_peak"

    def shown(self, value: float | None) -> float | None:
        """The value as a report shows it: a share (input share, device idle) as a percentage."""
        shares = (GateMetric.INPUT_SHARE, GateMetric.DEVICE_IDLE)
        return percent(value) if self in shares and value is not None else value


class Change(BaseModel):
    base: float | None
    head: float | None

    @property
    def delta(self) -> float | None:
        return None if self.base is None or self.head is None else self.head - self.base

    @property
    def ratio(self) -> float | None:
        if self.base is None or self.head is None or self.base == 0:
            return None
        return self.head / self.base


class OpChange(BaseModel):
    """Self time per step (captures of different lengths compare fairly)."""

    name: str
    type: str
    base_ms_per_step: float | None
    head_ms_per_step: float | None


class Comparison(BaseModel):
    base_id: str
    head_id: str
    metrics: dict[str, Change] = Field(default_factory=dict)  # GateMetric values -> change
    step_breakdown_ms: dict[str, Change] = Field(default_factory=dict)
    ops_new: list[OpChange] = Field(default_factory=list)
    ops_gone: list[OpChange] = Field(default_factory=list)
    ops_grown: list[OpChange] = Field(default_factory=list)
    findings_new: list[str] = Field(default_factory=list)
    findings_resolved: list[str] = Field(default_factory=list)
    # The step time's change with its 95 % interval from both captures' steps (verification.py).
    step_change: StepChange | None = None
    notes: list[str] = Field(default_factory=list)

    def ratio(self, metric: GateMetric) -> float | None:
        change = self.metrics.get(metric.value)
        return change.ratio if change else None

    def is_regression(self, metric: GateMetric, max_regression: float) -> bool | None:
        """True when `metric` grew past `max_regression` (0.10 = 110 % of base); None if unknown.

        Step time is decided with its interval: a regression when the change is past
        `max_regression` and beyond the noise (its 95 % interval, which counts what two
        captures of the unchanged job differ by, wholly above no change), so two captures of an
        unchanged job do not fail a gate and a real regression past the threshold is caught
        (bench/bench_verification.py measures both). Without an interval (a capture of one
        step), the change alone decides (per example where the batch changed), and for the
        other metrics the bare ratio."""
        change = self.step_change
        if metric is GateMetric.STEP_TIME and change and change.change_interval_95:
            past = change.change_share is not None and change.change_share > max_regression
            return past and change.slower
        if metric is GateMetric.STEP_TIME and change and change.examples_per_step:
            return change.change_share is not None and change.change_share > max_regression
        return regressed(self.ratio(metric), max_regression)


def regressed(ratio: float | None, max_regression: float) -> bool | None:
    """The one verdict on a bare ratio (head / base): past `max_regression` (0.10 = 110 % of
    base) is a regression; None when the ratio is unknown. The fleet page reads it too."""
    return None if ratio is None else ratio > 1 + max_regression


def gate_values(snapshot: Snapshot) -> dict[GateMetric, float | None]:
    s = snapshot.summary
    if s is None:
        return dict.fromkeys(GateMetric)
    peaks = [m.peak_bytes_in_use for m in s.memory]
    return {
        GateMetric.STEP_TIME: s.step_time.avg_ms,
        GateMetric.INPUT_SHARE: s.input_pipeline.input_share,
        GateMetric.DEVICE_IDLE: s.device_idle_share,
        GateMetric.MEMORY_PEAK: float(max(peaks)) if peaks else None,
    }


def compare(base: Snapshot, head: Snapshot) -> Comparison:
    result = Comparison(base_id=base.id, head_id=head.id)
    if base.summary is None or head.summary is None:
        missing = [s.id for s in (base, head) if s.summary is None]
        result.notes.append(f"not analysed: {', '.join(missing)}; only analysed snapshots compare")
        return result
    base_values, head_values = gate_values(base), gate_values(head)
    result.metrics = {m.value: Change(base=base_values[m], head=head_values[m]) for m in GateMetric}
    for field in StepBreakdown.model_fields:
        b = getattr(base.summary.step_time.breakdown_avg, field)
        h = getattr(head.summary.step_time.breakdown_avg, field)
        if b or h:
            result.step_breakdown_ms[field] = Change(base=b, head=h)
    between, source = between_captures_sd([base, head])
    result.step_change = step_change(base.summary, head.summary, base.id + head.id, between, source)
    if result.step_change.note:
        result.notes.append(result.step_change.note)
    _compare_ops(base, head, result)
    base_rules = {f.rule for f in base.findings}
    head_rules = {f.rule for f in head.findings}
    result.findings_new = sorted(head_rules - base_rules)
    result.findings_resolved = sorted(base_rules - head_rules)
    if base.target != head.target:
        result.notes.append(f"different targets: {base.target} vs {head.target}")
    return result


def _compare_ops(base: Snapshot, head: Snapshot, result: Comparison) -> None:
    """Top ops by name: new in head, gone from head, or grown past OP_GROWTH_SHARE per step."""
    base_ops, head_ops = _ops_per_step(base), _ops_per_step(head)
    for name, (op_type, now) in head_ops.items():
        before = base_ops.get(name, (op_type, None))[1]
        change = OpChange(name=name, type=op_type, base_ms_per_step=before, head_ms_per_step=now)
        if before is None:
            result.ops_new.append(change)
        elif now - before > OP_GROWTH_MIN_MS_PER_STEP and now > before * (1 + OP_GROWTH_SHARE):
            result.ops_grown.append(change)
    result.ops_gone = [
        OpChange(name=name, type=op_type, base_ms_per_step=ms, head_ms_per_step=None)
        for name, (op_type, ms) in base_ops.items()
        if name not in head_ops
    ]


def _ops_per_step(snapshot: Snapshot) -> dict[str, tuple[str, float]]:
    steps = max(snapshot.summary.step_time.count, 1)
    return {op.name: (op.type, op.self_time_ms / steps) for op in snapshot.summary.top_ops}


def parse_threshold(text: str) -> float:
    """`10%` or `0.1` -> 0.1."""
    text = text.strip()
    value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    if not 0 <= value < 100:
        raise ValueError(f"threshold {text!r} must be a non-negative share such as 10% or 0.1")
    return value
