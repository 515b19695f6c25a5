"""Did the fix work: a job's new snapshot against its last one that raised findings.

Each finding of either snapshot gets a status (`resolved`: it no longer fires; `persists`;
`regressed`: it still fires with more of the step at stake, or the step got slower; `new`), the
job's step time before and after, and the change with its 95 % interval from the per-step samples
of both captures (a bootstrap of the ratio of the means: each capture's steps resampled with
replacement). A resolved finding's measured saving stands beside its predicted one
(`finding.impact`), so a prediction can be checked and a fix proven. What a snapshot records of
it (`Verification`, `StepChange`) is in verification_record.py.

A prediction is checked (`prediction`: within, below or above its range, the measured saving's
95 % interval against it) where the step's change is that finding's: it alone resolved, or, none
resolved, it alone persists on a step faster beyond the noise. A finding that persists on a step
no faster was most likely not fixed yet; a change shared by several is no one's. One capture
each side is one sample of the host: a saving outside the range says to capture again before
concluding (on a shared 2-core VM, nothing else busy, a dozen captures of one job measured its
step at 13.8 to 26.9 ms).

A capture with fewer than `MIN_STEPS` steps has no interval, and says so.
"""

from __future__ import annotations

import math
import random
import statistics

from profiler_service.across.comparability import differences, examples_changed
from profiler_service.analysis.input_impact import ACTION_LABELS, modelled_actions
from profiler_service.analysis.models import ActionSaving, Finding, Impact, Summary
from profiler_service.analysis.pipeline_advice import advise
from profiler_service.verification_record import (
    FixStatus,
    PredictionCheck,
    StepChange,
    Verification,
)

MIN_STEPS = 2  # per capture, for an interval
BOOTSTRAP_RESAMPLES = 1000
Z_95 = 1.96
# A finding that still fires is `regressed` when the share of step time at stake grew by this
# much (absolute) or more.
REGRESSED_SHARE = 0.05


def check_prediction(
    saving_range: tuple[float, float] | None, change: StepChange
) -> PredictionCheck | None:
    """Within where the measured saving's 95 % interval (the point, without one) meets the
    range; None where there is nothing to check, a memory finding's (0, 0) among them: it
    promised no step time. A range below 0 (a change that slows the step: a GIL convoy) is
    checked too."""
    if saving_range is None or change.change_share is None or saving_range == (0.0, 0.0):
        return None
    lo, hi = saving_range
    fastest, slowest = change.change_interval_95 or (change.change_share, change.change_share)
    if -fastest < lo:  # even the most it may have saved is less than the least predicted
        return PredictionCheck.BELOW
    return PredictionCheck.ABOVE if -slowest > hi else PredictionCheck.WITHIN


def step_samples(summary: Summary | None) -> list[float]:
    """Per-training-step times of a capture (its samples scaled to its average per step)."""
    if summary is None or summary.step_time.avg_ms is None:
        return []
    samples = [s.step_time_ms for s in summary.step_time.steps if s.step_time_ms > 0]
    if not samples:
        return []
    scale = summary.step_time.avg_ms / statistics.fmean(samples)
    return [x * scale for x in samples]


def step_change(
    before: Summary | None,
    after: Summary | None,
    seed: str = "",
    between_sd: float = 0.0,
    between_source: str | None = None,
) -> StepChange:
    """The step time's change and its 95 % interval: the bootstrap of both captures' steps
    (percentile method), widened by `between_sd`, the standard deviation of log(a capture's
    mean step) between captures of the unchanged job (capture_noise.py), added in quadrature
    for each of the two captures on the log scale."""
    a, b = step_samples(before), step_samples(after)
    now = StepChange(
        step_ms_before=before.step_time.avg_ms if before else None,
        step_ms_after=after.step_time.avg_ms if after else None,
        differences=differences(before, after),
    )
    if not now.like_with_like:
        now.note = "not like with like: " + "; ".join(
            d.detail for d in now.differences if not d.accounted
        )
    if not now.step_ms_before or now.step_ms_after is None:
        now.note = "no step time in one of the captures: no change measured"
        return now
    unlike = now.note
    per_step = (1.0, 1.0)
    if before is not None and after is not None and (told := examples_changed(before, after)):
        now.examples_per_step, per_step = told, told  # time per example from here on
        a, b = [x / told[0] for x in a], [x / told[1] for x in b]
        per_example = (
            f"the batch changed ({told[0]:g} -> {told[1]:g} examples a step): the change is "
            "of the time per example"
        )
        unlike = f"{per_example}; {unlike}" if unlike else per_example
        now.note = unlike
    now.change_share = round(
        (now.step_ms_after / per_step[1]) / (now.step_ms_before / per_step[0]) - 1, 4
    )
    if len(a) < MIN_STEPS or len(b) < MIN_STEPS:
        few = (
            f"{min(len(a), len(b))} step(s) in one capture: no interval (at least {MIN_STEPS} "
            "steps each); capture for longer to prove the change"
        )
        now.note = f"{few}; {unlike}" if unlike else few
        return now
    rng = random.Random(seed)  # the same two snapshots, the same interval
    ratios = sorted(
        statistics.fmean(rng.choices(b, k=len(b))) / statistics.fmean(rng.choices(a, k=len(a))) - 1
        for _ in range(BOOTSTRAP_RESAMPLES)
    )
    lo = ratios[int(0.025 * (BOOTSTRAP_RESAMPLES - 1))]
    hi = ratios[round(0.975 * (BOOTSTRAP_RESAMPLES - 1))]
    if between_sd > 0:
        within = (math.log1p(hi) - math.log1p(lo)) / (2 * Z_95)
        half = Z_95 * math.sqrt(within**2 + 2 * between_sd**2)
        centre = math.log1p(now.change_share)
        lo, hi = math.expm1(centre - half), math.expm1(centre + half)
        now.between_captures_sd = round(between_sd, 4)
        now.between_captures_source = between_source
    now.change_interval_95 = (round(lo, 4), round(hi, 4))
    return now


def actions_seen(old: Finding, after: Summary | None) -> ActionSaving | None:
    """The prediction of the changes of `old`'s recommendation that the later capture shows
    made (the Python gone from the pipeline, its slowest map parallel, a prefetch at its end);
    None where the finding predicted no changes apart, or the later pipeline cannot say."""
    if old.impact is None or not old.impact.actions or after is None:
        return None
    now = advise(after.input_pipeline)
    if now.generic:  # XProf named no iterators: what changed cannot be read
        return None
    still = set(modelled_actions(now.lacks_codes))
    done = [a for a in modelled_actions(old.evidence.get("pipeline_lacks", [])) if a not in still]
    return old.impact.action("+".join(done)) if done else None


def describe_actions(code: str) -> str:
    """`python+prefetch` -> `the Python moved into TF ops and a prefetch at the end`."""
    return " and ".join(ACTION_LABELS.get(a, a) for a in code.split("+"))


def verify(
    before: list[Finding],
    after: list[Finding],
    change: StepChange,
    after_summary: Summary | None = None,
) -> list[Verification]:
    """Each rule of either snapshot with what became of it, resolved first, then by rule. With
    `after_summary`, a finding that predicted each change apart is held against the changes
    that capture shows made (`actions_seen`)."""
    earlier = {f.rule: f for f in before}
    later = {f.rule: f for f in after}
    measured = None if change.change_share is None else round(-change.change_share, 4)
    # Whose change the step's is: the one finding that resolved, or, none resolved, the one
    # that persists on a faster step (or a slower one, where its changes were predicted to
    # slow it: below).
    fixed = sorted(earlier.keys() - later.keys()) or (
        sorted(earlier.keys() & later.keys()) if change.faster or change.slower else []
    )
    found = []
    for rule in sorted(earlier.keys() | later.keys()):
        old, new = earlier.get(rule), later.get(rule)
        if new is None:
            status = FixStatus.RESOLVED
        elif old is None:
            status = FixStatus.NEW
        elif new.impact_share >= old.impact_share + REGRESSED_SHARE or change.slower:
            status = FixStatus.REGRESSED
        else:
            status = FixStatus.PERSISTS
        predicted: Impact | ActionSaving | None = old.impact if old is not None else None
        seen = actions_seen(old, after_summary) if old is not None else None
        predicted = seen or predicted
        checked = (
            predicted is not None
            and fixed == [rule]
            # a slower step is checked only where the changes made were predicted to slow it
            and (status is not FixStatus.REGRESSED or predicted.saving_share < 0)
            and change.like_with_like  # a step of other work or hardware proves no fix
        )
        found.append(
            Verification(
                rule=rule,
                status=status,
                step_ms_before=change.step_ms_before,
                step_ms_after=change.step_ms_after,
                change_share=change.change_share,
                change_interval_95=change.change_interval_95,
                predicted_saving_share=predicted.saving_share if predicted else None,
                predicted_saving_range=predicted.saving_range if predicted else None,
                measured_saving_share=measured if old is not None else None,
                prediction=check_prediction(predicted.saving_range, change) if checked else None,
                action=seen.action if seen else None,
            )
        )
    order = list(FixStatus)
    return sorted(found, key=lambda v: (order.index(v.status), v.rule))


def headline(since: str, verification: list[Verification]) -> str:
    """`Since 20261205-…: input_bound resolved (predicted -95%), step 76 -> 3 ms (-96%, …)`;
    a saving outside its predicted range is named, with what to do about it."""
    if not verification:
        return ""
    first = verification[0]
    parts = []
    for v in verification:
        text = f"{v.rule} {v.status}"
        missed = v.prediction not in (None, PredictionCheck.WITHIN)
        if missed and v.predicted_saving_range is not None:
            lo, hi = v.predicted_saving_range
            text += (
                f" (saved {v.measured_saving_share:.0%}, {v.prediction} the predicted "
                f"{lo:.0%}-{hi:.0%}: one capture each side; capture again to confirm)"
            )
        elif v.status is FixStatus.RESOLVED and v.predicted_saving_share is not None:
            text += f" (predicted -{v.predicted_saving_share:.0%})"
        elif v.prediction is PredictionCheck.WITHIN and (v.predicted_saving_share or 0) < 0:
            text += f" (as predicted: {-(v.predicted_saving_share or 0):.0%} slower)"
        if v.action:
            text += f" [seen: {describe_actions(v.action)}]"
        parts.append(text)
    step = ""
    if first.step_ms_before is not None and first.step_ms_after is not None:
        step = f"; step {first.step_ms_before:.3g} -> {first.step_ms_after:.3g} ms"
        if first.change_share is not None:
            step += f" ({first.change_share:+.0%}"
            if first.change_interval_95 is not None:
                lo, hi = first.change_interval_95
                step += f", 95% interval {lo:+.0%} to {hi:+.0%}"
            step += ")"
    return f"Since {since}: " + ", ".join(parts) + step
