"""What a capture cost the job, from the step timings around it (capture/cost.py): the ring's
samples split into before and during the trace, each step-weighted; Prometheus's rate against
the trace's own steps where the job's timings are not sampled; unknown, said so, otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from profiler_service.capture.cost import BEFORE_MIN_S, capture_cost
from profiler_service.lookback.models import LeadUp, Series

T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


def ring(step_ms: dict[float, float], steps: dict[float, float]) -> LeadUp:
    """Agent samples at T0 + t seconds, each over the second before it."""
    at = T0.timestamp()
    return LeadUp(
        start=T0 - timedelta(seconds=60),
        end=T0 + timedelta(seconds=10),
        series=[
            Series(name="step_time_ms", unit="ms", source="agent",
                   points=[(at + t, v) for t, v in step_ms.items()]),
            Series(name="steps_per_s", unit="count", source="agent",
                   points=[(at + t, v) for t, v in steps.items()]),
        ],
    )  # fmt: skip


def test_steps_before_and_during_the_trace_are_weighed_by_their_counts():
    # 20 s at 10 ms a step (100 steps/s); during the 3 s trace, 12.5 ms (80 steps/s)
    times = {float(t): 10.0 for t in range(-19, 1)} | {1.0: 12.5, 2.0: 12.5, 3.0: 12.5}
    counts = {float(t): 100.0 for t in range(-19, 1)} | {1.0: 80.0, 2.0: 80.0, 3.0: 80.0}
    times[4.0], counts[4.0] = 10.0, 100.0  # after the trace: neither
    times[-30.0], counts[-30.0] = 50.0, 20.0  # older than the before window: neither
    cost = capture_cost(ring(times, counts), T0, T0 + timedelta(seconds=3))
    assert cost.source == "agent"
    assert cost.step_ms_before == 10.0 and cost.step_ms_during == 12.5
    # 25 % slower while traced: the snapshot says how to capture more cheaply
    assert "slowed the job's steps by 25%" in cost.note and "docs/performance.md" in cost.note
    assert cost.ratio == pytest.approx(1.25)
    # before: the BEFORE_MIN_S (10 s, more than twice the trace) up to its start
    assert cost.steps_before == 100 * BEFORE_MIN_S and cost.steps_during == 240


def test_a_slow_step_among_many_weighs_as_its_one_step():
    times = {-2.0: 10.0, -1.0: 10.0, 0.0: 10.0, 1.0: 500.0, 2.0: 10.0}
    counts = {-2.0: 100.0, -1.0: 100.0, 0.0: 100.0, 1.0: 1.0, 2.0: 99.0}
    cost = capture_cost(ring(times, counts), T0, T0 + timedelta(seconds=2))
    assert cost.step_ms_during == pytest.approx((500 + 99 * 10) / 100)


def test_no_step_before_the_trace_is_said():
    cost = capture_cost(ring({1.0: 10.0}, {1.0: 100.0}), T0, T0 + timedelta(seconds=2))
    assert cost.ratio is None and "before the trace" in cost.note


def test_prometheus_s_rate_against_the_trace_s_steps_where_the_ring_has_none():
    at = T0.timestamp()
    lead_up = LeadUp(
        start=T0 - timedelta(minutes=5),
        end=T0,
        series=[Series(name="step_time_ms", unit="ms", source="prometheus",
                       points=[(at - 30, 20.0), (at - 1, 21.0), (at + 5, 40.0)])],
    )  # fmt: skip
    cost = capture_cost(lead_up, T0, T0 + timedelta(seconds=5), trace_step_ms=23.1, trace_steps=9)
    assert cost.source == "prometheus+trace"
    assert (cost.step_ms_before, cost.step_ms_during, cost.steps_during) == (21.0, 23.1, 9)
    assert cost.ratio == pytest.approx(1.1)


def test_a_job_that_reports_no_step_timings_has_an_unknown_cost_and_is_told_why():
    cost = capture_cost(None, T0, T0 + timedelta(seconds=2), trace_step_ms=12.0, trace_steps=5)
    assert cost.ratio is None and "ProfilerStepCallback" in cost.note


def test_a_cheap_capture_says_nothing_more():
    times = {float(t): 10.0 for t in range(-9, 1)} | {1.0: 10.3, 2.0: 10.3}
    counts = dict.fromkeys(times, 100.0)
    cost = capture_cost(ring(times, counts), T0, T0 + timedelta(seconds=2))
    assert cost.ratio == pytest.approx(1.03) and cost.note is None
