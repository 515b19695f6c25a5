"""compare(): direction and size of each change, ops per step, findings new and resolved."""

from __future__ import annotations

import pytest

from profiler_service.across.compare import GateMetric, compare, parse_threshold
from profiler_service.analysis.models import (
    Finding,
    OpCategory,
    Severity,
    StepBreakdown,
    StepTime,
    Summary,
    TopOp,
)
from profiler_service.config.serving import ReportSettings
from profiler_service.models import CaptureOptions, Snapshot

OPTIONS = CaptureOptions(
    duration_ms=1000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
)


def snap(
    sid: str, steps: int, avg_ms: float, input_ms: float, ops: dict[str, float], rules: list[str]
) -> Snapshot:
    summary = Summary(
        step_time=StepTime(
            count=steps,
            avg_ms=avg_ms,
            breakdown_avg=StepBreakdown(input_ms=input_ms, host_compute_ms=avg_ms - input_ms),
        ),
        top_ops=[
            TopOp(
                name=n,
                type="MatMul",
                host_or_device="Host",
                category=OpCategory.COMPUTE,
                occurrences=steps,
                self_time_ms=ms,
                self_time_share=0.1,
            )
            for n, ms in ops.items()
        ],
    )
    summary.input_pipeline.input_share = round(input_ms / avg_ms, 3)
    return Snapshot(
        id=sid,
        target="t",
        capture=OPTIONS,
        summary=summary,
        findings=[Finding(rule=r, severity=Severity.WARNING, title=r) for r in rules],
    )


def test_slower_head_is_a_regression_with_its_size_and_cause():
    base = snap("a", steps=100, avg_ms=10, input_ms=2, ops={"mm": 500, "old": 100}, rules=["x"])
    # Half as many steps captured: totals halve, per-step times do not.
    head = snap("b", steps=50, avg_ms=15, input_ms=7, ops={"mm": 250, "new": 400}, rules=["y"])
    c = compare(base, head)
    assert c.ratio(GateMetric.STEP_TIME) == pytest.approx(1.5)
    assert c.is_regression(GateMetric.STEP_TIME, 0.10) is True
    assert c.is_regression(GateMetric.STEP_TIME, 0.60) is False
    assert c.step_breakdown_ms["input_ms"].delta == pytest.approx(5)
    assert [o.name for o in c.ops_new] == ["new"] and c.ops_new[0].head_ms_per_step == 8
    assert [o.name for o in c.ops_gone] == ["old"]
    assert c.ops_grown == []  # 5 ms per step in both
    assert (c.findings_new, c.findings_resolved) == (["y"], ["x"])


@pytest.mark.parametrize(("head_ms", "regressed"), [(109, False), (110, False), (111, True)])
def test_the_default_gate_is_110_percent_of_the_baseline(head_ms, regressed):
    """The gate's own threshold, where no measured time reaches it (the e2e test compares real
    captures of one job within a band wide enough for a busy machine)."""
    default = ReportSettings().regression_max_share
    assert default == pytest.approx(0.10)
    base, head = snap("a", 10, 100, 1, {}, []), snap("b", 10, head_ms, 1, {}, [])
    assert compare(base, head).is_regression(GateMetric.STEP_TIME, default) is regressed


def test_grown_op_is_reported_per_step():
    base = snap("a", 100, 10, 1, {"mm": 100}, [])
    head = snap("b", 100, 10, 1, {"mm": 200}, [])
    grown = compare(base, head).ops_grown
    assert [(o.name, o.base_ms_per_step, o.head_ms_per_step) for o in grown] == [("mm", 1, 2)]


def test_missing_numbers_cannot_gate():
    base = snap("a", 10, 10, 1, {}, [])
    head = Snapshot(id="b", target="t", capture=OPTIONS)  # failed, never analysed
    c = compare(base, head)
    assert c.is_regression(GateMetric.STEP_TIME, 0.1) is None
    assert c.notes and "b" in c.notes[0]
    assert compare(base, base).is_regression(GateMetric.DEVICE_IDLE, 0.1) is None


@pytest.mark.parametrize(
    ("text", "share"),
    [("10%", 0.10), ("0.1", 0.10), ("0%", 0.0), (" 25 % ".replace(" ", ""), 0.25)],
)
def test_thresholds(text, share):
    assert parse_threshold(text) == pytest.approx(share)


@pytest.mark.parametrize("text", ["-5%", "abc", "%"])
def test_bad_thresholds(text):
    with pytest.raises(ValueError):
        parse_threshold(text)
