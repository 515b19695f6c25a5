"""What a capture cost the job, from the step timings around it (capture/cost.py): the ring's
samples split into before and during the trace, a step's time the wall time over the steps
counted; Prometheus's rate against
the trace's own steps where the job's timings are not sampled; unknown, said so, otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from profiler_service.capture.cost import BEFORE_MIN_S, MIN_SAMPLES_BEFORE, capture_cost
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


def test_a_step_s_time_is_the_wall_time_the_job_paid_between_its_markers_too():
    # The markers time 8 ms of each step; the job counts 100 steps a second before the trace
    # (10 ms each, 2 between the markers) and 80 during it: the trace's cost is the 25 % the
    # job's throughput fell, not the marked steps' 8 -> 8.4 ms.
    times = {float(t): 8.0 for t in range(-9, 1)} | {1.0: 8.4, 2.0: 8.4}
    counts = {float(t): 100.0 for t in range(-9, 1)} | {1.0: 80.0, 2.0: 80.0}
    cost = capture_cost(ring(times, counts), T0, T0 + timedelta(seconds=2))
    assert (cost.step_ms_before, cost.step_ms_during) == (10.0, 12.5)
    assert cost.ratio == pytest.approx(1.25)


def test_a_pause_before_the_trace_does_not_move_its_before_figure():
    # An evaluation held the job 0.9 s of one second before the trace (10 steps in it): the
    # median second's 10 ms stands.
    times = {float(t): 10.0 for t in range(-9, 1)} | {1.0: 10.0, 2.0: 10.0}
    counts = {float(t): 100.0 for t in range(-9, 1)} | {1.0: 100.0, 2.0: 100.0}
    counts[-4.0] = 10.0
    cost = capture_cost(ring(times, counts), T0, T0 + timedelta(seconds=2))
    assert cost.step_ms_before == 10.0 and cost.ratio == pytest.approx(1.0)


def test_seconds_partly_outside_the_trace_do_not_dilute_those_inside():
    # The trace runs from 0.4 s to 2.4 s: the second ending at 2 is wholly inside; those
    # ending at 1 (60 % inside) and 3 (40 %) also hold untraced steps.
    times = {float(t): 10.0 for t in range(-9, 4)}
    counts = {float(t): 100.0 for t in range(-9, 4)} | {1.0: 90.0, 2.0: 50.0}
    start = T0 + timedelta(seconds=0.4)
    cost = capture_cost(ring(times, counts), start, start + timedelta(seconds=2))
    assert cost.steps_during == 50 and cost.step_ms_during == 20.0


def test_without_step_counts_the_marked_time_is_the_figure_and_said_so():
    times = {float(t): 10.0 for t in range(-9, 1)} | {1.0: 11.0, 2.0: 11.0}
    lead_up = ring(times, {})
    lead_up.series = [s for s in lead_up.series if s.name == "step_time_ms"]
    cost = capture_cost(lead_up, T0, T0 + timedelta(seconds=2))
    assert cost.ratio == pytest.approx(1.1) and "marked steps" in cost.note


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


def test_without_a_look_back_the_unknown_cost_says_nothing_reads_the_steps():
    cost = capture_cost(None, T0, T0 + timedelta(seconds=2), trace_step_ms=12.0, trace_steps=5)
    assert cost.ratio is None and "PROFILER_LOOKBACK_S=0" in cost.note


def test_an_unknown_cost_gives_the_cause_the_look_back_recorded():
    why = "the job marked no step (`ProfilerStepCallback` in `fit()`'s callbacks)"
    lead_up = LeadUp(start=T0 - timedelta(minutes=5), end=T0, missing={"step_time_ms": why})
    cost = capture_cost(lead_up, T0, T0 + timedelta(seconds=2), trace_step_ms=12.0, trace_steps=5)
    assert cost.ratio is None and cost.note == f"unknown: {why}"


def test_a_cheap_capture_says_nothing_more():
    times = {float(t): 10.0 for t in range(-9, 1)} | {1.0: 10.3, 2.0: 10.3}
    counts = {float(t): 100.0 for t in range(-9, 1)} | {1.0: 97.0, 2.0: 97.0}
    cost = capture_cost(ring(times, counts), T0, T0 + timedelta(seconds=2))
    assert cost.ratio == pytest.approx(1000 / 97 / 10, 1e-3) and cost.note is None


def test_steps_longer_than_a_sample_are_timed_from_one_step_s_end_to_the_next():
    # 2.5 s steps: the ring holds a sample only where a step ended, each over the time since
    # the one before; while traced, a step took 3 s.
    ends = [-10.0, -7.5, -5.0, -2.5, 0.0, 3.0]
    times = {t: 2500.0 for t in ends[:-1]} | {3.0: 3000.0}
    cost = capture_cost(ring(times, dict.fromkeys(ends, 1.0)), T0, T0 + timedelta(seconds=3))
    assert (cost.step_ms_before, cost.step_ms_during) == (2500.0, 3000.0)
    assert cost.ratio == pytest.approx(1.2) and cost.steps_during == 1


def test_a_job_that_has_just_started_compares_nothing_and_says_what_it_can():
    # The demo's case: the capture came right after the job's first step (1,000 ms: tracing and
    # compiling), then 83.3 ms steps while traced. One step is no "before".
    times = {0.0: 1000.0, 1.0: 83.3, 2.0: 83.3, 3.0: 83.3}
    counts = {0.0: 1.0, 1.0: 12.0, 2.0: 12.0, 3.0: 12.0}
    cost = capture_cost(ring(times, counts), T0, T0 + timedelta(seconds=3))
    assert cost.ratio is None and cost.step_ms_before is None
    assert cost.note.startswith("only 1 step ended before the trace")
    assert "too few to compare with" in cost.note
    assert cost.note.endswith(f"{1000 / 12:.1f} ms a step while traced (36 steps)")
    assert cost.steps_during == 36


def test_two_samples_before_are_too_few_too():
    times = {-1.0: 10.0, 0.0: 10.0, 1.0: 10.0, 2.0: 10.0}
    counts = {-1.0: 100.0, 0.0: 100.0, 1.0: 100.0, 2.0: 100.0}
    cost = capture_cost(ring(times, counts), T0, T0 + timedelta(seconds=2))
    assert cost.ratio is None and "only 200 steps ended before the trace" in cost.note


def test_slow_steps_are_compared_over_the_last_samples_before_the_window():
    # 6 s steps: the 10 s before a 3.3 s trace hold two step ends; the third is looked back for.
    # The step the trace runs in takes 6.6 s.
    ends = [-30.0, -24.0, -18.0, -12.0, -6.0, 0.0, 6.6]
    times = {t: 6000.0 for t in ends[:-1]} | {6.6: 6600.0}
    cost = capture_cost(ring(times, dict.fromkeys(ends, 1.0)), T0, T0 + timedelta(seconds=3.3))
    assert cost.steps_before == MIN_SAMPLES_BEFORE and cost.step_ms_before == 6000.0
    assert cost.ratio == pytest.approx(1.1)
