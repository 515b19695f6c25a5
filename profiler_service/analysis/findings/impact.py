"""What a finding's fix saves: the helpers every area's impact models share, and the models
several areas use (`device_wait`, `unmeasured`).

Each rule's finding says which share of step time is at stake (`impact_share`: the input wait,
the tracing time, the idle GPU...). A fix does not give all of it back: what remains after it is
the model, a function beside the rule in its area's module (`@rule(..., impact=model)`), whose
docstring states it. The saving is a point and a range (`saving_range`), the step time predicted
after the fix follows from the point, and `basis` says in one sentence what the fix removes and
what remains. Where a finding is about memory rather than time, the saving is 0 and says so: it
ranks last (`registry.rank`).

The factors are named constants, each with where it comes from, in the model's module. They are
starting points to be checked against fixed twins (issue 37's pairs), not measurements of every
job: the range is there because the same fix saves more or less depending on what the job does
meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler_service.analysis.models import Finding, Impact, Summary

__all__ = ["ImpactModel", "device_wait", "nothing", "removed", "unmeasured"]

ImpactModel = Callable[[Finding, Summary], Impact]

# The GPU's idle time, kernel launches, transfers and communication a fix overlaps or removes.
DEVICE_WAIT_REMOVED = 0.7
DEVICE_WAIT_REMOVED_MIN = 0.4


def removed(summary: Summary, at_stake: float, point: float, low: float, basis: str) -> Impact:
    """The fix removes `point` (`low` to all) of `at_stake`, a share of step time."""
    at_stake = min(max(at_stake, 0.0), 1.0)
    now = summary.step_time.avg_ms
    saving = round(at_stake * point, 4)
    after = round(now * (1 - saving), 3) if now else None
    return Impact(
        step_ms_now=now,
        step_ms_after=after,
        saving_share=saving,
        saving_range=(round(at_stake * low, 4), round(at_stake, 4)),
        basis=basis,
    )


def spread_about(point: float, spread: tuple[float, float]) -> tuple[float, float]:
    """A saving's range: its point plus the spread of measured - predicted savings that held
    80 % of the pairs its model was fitted on; never above all of the step."""
    return (round(min(1.0, point + spread[0]), 4), round(min(1.0, point + spread[1]), 4))


def nothing(summary: Summary, why: str) -> Impact:
    now = summary.step_time.avg_ms
    return Impact(
        step_ms_now=now,
        step_ms_after=now,
        saving_share=0.0,
        saving_range=(0.0, 0.0),
        basis=f"Saves nothing measurable in step time: {why}.",
    )


def device_wait(finding: Finding, summary: Summary) -> Impact:
    """The share of step time the device waits (idle, launches, copies, collectives, the
    slowest worker's excess: `impact_share`): a fix overlaps or removes
    `DEVICE_WAIT_REMOVED` of it, at least `DEVICE_WAIT_REMOVED_MIN`; on a GPU the busy share
    after the fix follows from the idle time it fills."""
    at_stake = finding.impact_share
    impact = removed(
        summary,
        at_stake,
        DEVICE_WAIT_REMOVED,
        DEVICE_WAIT_REMOVED_MIN,
        f"The fix fills {DEVICE_WAIT_REMOVED:.0%} of the {at_stake:.0%} of step time the "
        "device waits; what remains is the waiting no overlap hides.",
    )
    gpu = summary.gpu
    if gpu is not None and gpu.active:
        busy = 1 - gpu.idle_share
        after = min(1.0, busy / (1 - impact.saving_share)) if impact.saving_share < 1 else 1.0
        impact.basis += f" The GPUs, busy {busy:.0%} now, would be busy {after:.0%}."
    return impact


def unmeasured(finding: Finding, summary: Summary) -> Impact:
    """Where to look, or how to capture better: no saving can be predicted from the capture."""
    return nothing(summary, "it says where to look or how to capture, not what a fix removes")
