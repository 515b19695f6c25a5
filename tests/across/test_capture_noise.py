"""What two captures of an unchanged job differ by, read from the untraced step times before
each capture, and the step change's interval widened by it: hand-made look-backs whose spread
is known."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest

from profiler_service.across.capture_noise import (
    BETWEEN_CAPTURES_SD,
    MAD_TO_SD,
    between_captures_sd,
)
from profiler_service.across.compare import GateMetric, compare
from profiler_service.across.verification import step_change
from profiler_service.analysis.models import StepBreakdown, StepSample, StepTime, Summary
from profiler_service.lookback.models import LeadUp, Series
from profiler_service.models import CaptureOptions, Snapshot, SnapshotStatus

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def steps(mean_ms: float, n: int = 200, seed: int = 1) -> Summary:
    rng = random.Random(seed)
    times = [mean_ms * (1 + rng.uniform(-0.02, 0.02)) for _ in range(n)]
    samples = [
        StepSample(name=str(i), step_time_ms=t, breakdown=StepBreakdown())
        for i, t in enumerate(times)
    ]
    return Summary(step_time=StepTime(count=n, avg_ms=sum(times) / n, steps=samples))


def snapshot(i: int, summary: Summary, look_back: list[float] | None) -> Snapshot:
    """Captured for 2 s at T0 + i minutes; `look_back`: 1-s step-time samples before it, the
    newest last."""
    began = T0 + timedelta(minutes=i)
    lead_up = None
    if look_back is not None:
        start = began.timestamp() - len(look_back)
        points = [(start + k, v) for k, v in enumerate(look_back)]
        series = Series(name="step_time_ms", unit="ms", source="agent", points=points)
        lead_up = LeadUp(start=began - timedelta(seconds=len(look_back)), end=began,
                         series=[series])  # fmt: skip
    return Snapshot(
        id=f"20261207-12{i:02d}00-trainer-{i:012x}",
        status=SnapshotStatus.READY,
        target="trainer",
        capture=CaptureOptions(
            duration_ms=2000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        created_at=began,
        capture_started_at=began,
        lead_up=lead_up,
        summary=summary,
    )


def alternating(low: float, high: float, windows: int) -> list[float]:
    """Two-second windows whose mean is `low`, then `high`, and so on (1-s samples)."""
    return [v for w in range(windows) for v in ((low, low) if w % 2 == 0 else (high, high))]


def test_the_spread_is_read_from_capture_length_windows_of_the_look_back():
    before = snapshot(0, steps(100), alternating(95, 105, 10))
    after = snapshot(5, steps(100), alternating(95, 105, 10))
    sd, source = between_captures_sd([before, after])
    # Each series' windows: log 95 and log 105 in turn, half of their distance from their
    # median; pooled over both, as a standard deviation.
    half = (math.log(105) - math.log(95)) / 2
    assert sd == pytest.approx(MAD_TO_SD * half, rel=1e-6)
    assert "untraced steps" in source and "20 windows" in source


def test_a_job_s_first_seconds_in_the_look_back_are_not_its_noise():
    # Tracing and tf.data's autotuning make the first windows twice as long; then steady.
    warming = [200.0] * 4 + [100.0, 101.0] * 8
    sd, _ = between_captures_sd([snapshot(0, steps(100), warming)])
    assert sd < 0.02


def test_without_a_look_back_the_measured_default_stands_in_and_says_so():
    sd, source = between_captures_sd([snapshot(0, steps(100), None), snapshot(1, steps(100), [])])
    assert sd == BETWEEN_CAPTURES_SD
    assert source.startswith("assumed")
    # A job that just started: its few seconds of look-back are not read either.
    young = snapshot(0, steps(100), alternating(90, 110, 6))
    assert between_captures_sd([young])[0] == BETWEEN_CAPTURES_SD


def test_samples_taken_during_the_capture_are_not_read():
    # The traced seconds are slower; a look-back that reached into them would read a spread.
    snap = snapshot(0, steps(100), [100.0] * 24)
    traced = (snap.capture_started_at + timedelta(seconds=1)).timestamp()
    snap.lead_up.series[0].points += [(traced, 180.0), (traced + 1, 180.0)]
    sd, _ = between_captures_sd([snap, snapshot(1, steps(100), [100.0] * 24)])
    assert sd == pytest.approx(0.0, abs=1e-12)


def test_the_noise_between_captures_widens_the_interval_a_gate_reads():
    base, head = steps(100, seed=1), steps(105, seed=2)
    alone = step_change(base, head, seed="x")
    assert alone.slower  # 200 steps each at 2 % noise: a 5 % change is beyond their noise
    widened = step_change(base, head, seed="x", between_sd=0.03, between_source="assumed")
    lo, hi = widened.change_interval_95
    assert lo < 0 < hi and not widened.slower
    # 1.96 * sqrt(2) * 0.03 on the log scale, about the measured change.
    assert math.log1p(hi) - math.log1p(widened.change_share) == pytest.approx(0.0832, abs=0.002)
    assert widened.between_captures_sd == 0.03 and widened.between_captures_source == "assumed"


def test_a_gate_on_a_job_whose_step_wanders_does_not_flag_what_it_wanders_by():
    wandering = alternating(92, 108, 20)
    base = snapshot(0, steps(100, seed=1), wandering)
    head = snapshot(5, steps(106, seed=2), wandering)
    result = compare(base, head)
    half = (math.log(108) - math.log(92)) / 2
    assert result.step_change.between_captures_sd == pytest.approx(MAD_TO_SD * half, rel=1e-3)
    assert result.is_regression(GateMetric.STEP_TIME, 0.05) is False
    steady = [100.0] * 40
    flagged = compare(
        snapshot(0, steps(100, seed=1), steady), snapshot(5, steps(112, seed=2), steady)
    )
    assert flagged.is_regression(GateMetric.STEP_TIME, 0.05) is True
