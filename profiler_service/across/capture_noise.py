"""What two captures of an unchanged job differ by: the noise a step-time change must exceed
before a gate or a verification calls it real.

A capture's own steps say how precisely it measured its few seconds (the bootstrap in
verification.py), not how much the job's step moves from one few seconds to the next: on a
shared host, two captures of one unchanged job differ by a few percent however many steps each
holds. That spread is read from the untraced step times the look-back sampled before each
capture (the agent's step counter, or the job's own metrics through Prometheus): the job's step
averaged over windows as long as the capture, and how far those windows' means stray from each
other. Where neither snapshot holds enough of them, `BETWEEN_CAPTURES_SD` stands in.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable

from profiler_service.models import Snapshot

__all__ = ["BETWEEN_CAPTURES_SD", "between_captures_sd"]

# The standard deviation of log(a capture's mean step) between captures of an unchanged job,
# where its own look-back cannot say: measured by bench/bench_verification.py on A/A pairs of
# the calibration family's job (a Python decoder waiting 1 ms an element, 59 ms steps), each
# capture of a fresh job, on a 2-core VM: 0.032 (15 pairs) and 0.039 (8 pairs).
BETWEEN_CAPTURES_SD = 0.035
MAD_TO_SD = 1.4826  # a normal distribution's standard deviation over its median |deviation|
# Windows a snapshot's look-back needs for its spread to be read: 20 s of a 2 s capture's.
# Fewer is a job that just started, whose first seconds (tracing, tf.data's autotuning) wander
# by 10-20 % (bench_verification's fresh jobs).
MIN_WINDOWS = 10
STEP_SERIES = "step_time_ms"


def between_captures_sd(snapshots: Iterable[Snapshot]) -> tuple[float, str]:
    """The standard deviation of log(mean step) between capture-length windows of these
    snapshots' jobs, pooled over their look-backs, and where it came from."""
    deviations: list[float] = []
    series = 0
    for snapshot in snapshots:
        means = _window_means(snapshot)
        if len(means) >= MIN_WINDOWS:
            logs = [math.log(m) for m in means]
            centre = statistics.median(logs)
            deviations += [x - centre for x in logs]
            series += 1
    if not series:
        return BETWEEN_CAPTURES_SD, "assumed (no look-back of step times to read it from)"
    # The median absolute deviation, as a standard deviation: a job's first seconds (tracing,
    # tf.data's autotuning) or a checkpoint in the look-back are not the noise between captures.
    sd = MAD_TO_SD * statistics.median(abs(d) for d in deviations)
    return sd, f"the job's untraced steps, {len(deviations)} windows before the captures"


def _window_means(snapshot: Snapshot) -> list[float]:
    """The look-back's step times before the capture, averaged over windows as long as it."""
    if snapshot.lead_up is None:
        return []
    began = snapshot.capture_started_at or snapshot.created_at
    window_s = max(snapshot.capture.duration_ms / 1000, 1e-3)
    points = sorted(
        (
            (t, v)
            for s in snapshot.lead_up.series
            if s.name == STEP_SERIES
            for t, v in s.points
            if t < began.timestamp() and v > 0
        ),
        reverse=True,
    )  # newest first: windows end where the capture began
    if len(points) < 2:
        return []
    spacing = statistics.median(a[0] - b[0] for a, b in itertools.pairwise(points))
    per_window = max(1, round(window_s / max(spacing, 1e-3)))  # each sample: its interval's steps
    whole = len(points) - len(points) % per_window
    return [
        statistics.fmean(v for _, v in points[i : i + per_window])
        for i in range(0, whole, per_window)
    ]
