"""Host-side overheads: Python and "All Others" time, eager execution, compiles."""

from __future__ import annotations

from profiler_service.analysis.evidence import (
    BetweenStepsEvidence,
    CompileTimeEvidence,
    EagerExecutionEvidence,
    HostOverheadEvidence,
    NoStepMarkersEvidence,
    ShortCaptureEvidence,
)
from profiler_service.analysis.models import Finding, InputBound, Severity, Summary
from profiler_service.analysis.rules.input_pipeline import gpu_input_verdict
from profiler_service.analysis.rules.registry import rule, share

# XProf's thresholds for "All Others" and kernel launch time (share of step time).
ALL_OTHER_HIGH_SHARE = 0.15
ALL_OTHER_MODERATE_SHARE = 0.03
# The training loop's own Python between marked steps, as a share of the step. Measured on
# 2-2.5 ms steps (tests/e2e/test_steps_per_execution.py): Keras 2's fit(), 7-20 %; Keras 3's,
# 2 %; Keras 2 with steps_per_execution=4, 8 %.
BETWEEN_STEPS_INFO_SHARE = 0.10
BETWEEN_STEPS_WARNING_SHARE = 0.20
# Steps this short pay a call's fixed Python per step: steps_per_execution amortises it.
SHORT_STEP_MS = 50.0
EAGER_WARNING_PCT = 10.0
# Ops a step runs eagerly, read from the capture's own events, before their dispatch counts.
EAGER_MIN_OPS_PER_STEP = 10
COMPILE_WARNING_SHARE = 0.10
MIN_STEPS = 3


@rule("host_overhead", evidence=HostOverheadEvidence)
def host_overhead(summary: Summary) -> Finding | None:
    """XProf's "All Others" time (Python, I/O between TF ops) is at least
    `ALL_OTHER_HIGH_SHARE` of the step (warning), or at least `ALL_OTHER_MODERATE_SHARE`
    when XProf says POTENTIALLY input-bound (info). Silent when a GPU's plane shows the
    time was spent waiting on tf.data (the input_bound finding says so).
    """
    st = summary.step_time
    other = share(st.breakdown_avg.other_ms, st.avg_ms)
    if gpu_input_verdict(summary) is not None:
        return None  # the GPU's plane shows that "All Others" was the wait for input
    if other >= ALL_OTHER_HIGH_SHARE:
        severity = Severity.WARNING
    elif other >= ALL_OTHER_MODERATE_SHARE and (
        summary.input_pipeline.classification is InputBound.POTENTIALLY
    ):
        severity = Severity.INFO
    else:
        return None
    return Finding(
        severity=severity,
        title=f"{other:.0%} of step time is 'All Others' time: Python or I/O between TF ops",
        evidence=HostOverheadEvidence(
            all_others_share=round(other, 4),
            all_others_ms_avg=st.breakdown_avg.other_ms,
            step_time_ms_avg=st.avg_ms,
        ).model_dump(),
        recommendation="Look for Python work in the training loop (logging, metrics, data "
        "conversion per step), move it out of the step or into tf.function, and "
        "avoid reading files synchronously between steps.",
        docs="https://www.tensorflow.org/guide/profiler#performance_analysis",
        impact_share=other,
    )


@rule("between_steps", evidence=BetweenStepsEvidence)
def between_steps(summary: Summary) -> Finding | None:
    """At least `BETWEEN_STEPS_INFO_SHARE` of each step (info; `BETWEEN_STEPS_WARNING_SHARE`:
    warning) runs between the step markers: the training loop's own Python from one marked
    step's end to the next one's start, which XProf's step table leaves out (`between_steps_ms`,
    step_markers.py). Short steps marked one per call are also told to run several per call.
    """
    st = summary.step_time
    between = share(st.breakdown_avg.between_steps_ms, st.avg_ms)
    if between < BETWEEN_STEPS_INFO_SHARE:
        return None
    severity = Severity.WARNING if between >= BETWEEN_STEPS_WARNING_SHARE else Severity.INFO
    advice = (
        "Look at what the training loop does between steps, outside the step marker: Python "
        "data loading or conversion (move it into tf.data with `prefetch`), logging, metrics "
        "or checkpoints every step."
    )
    if st.steps_per_marker == 1 and (st.avg_ms or 0) < SHORT_STEP_MS:
        advice = (
            "The steps are short, so a call's fixed Python (Keras's data handler and callbacks) "
            "is a large part of each: run several steps per call, `model.compile(..., "
            "steps_per_execution=N)` with N of 8 to 100 (in a custom loop, a `tf.function` that "
            f"runs N batches). {advice}"
        )
    return Finding(
        severity=severity,
        title=f"{between:.0%} of each step runs between the marked steps, in the training "
        "loop's own Python",
        evidence=BetweenStepsEvidence(
            between_steps_share=round(between, 4),
            between_steps_ms_avg=st.breakdown_avg.between_steps_ms,
            step_time_ms_avg=st.avg_ms,
            steps_per_marker=st.steps_per_marker,
        ).model_dump(),
        recommendation=advice,
        docs="https://www.tensorflow.org/api_docs/python/tf/keras/Model#compile",
        impact_share=between,
    )


@rule("eager_execution", evidence=EagerExecutionEvidence)
def eager_execution(summary: Summary) -> Finding | None:
    """At least `EAGER_WARNING_PCT` % of host op time runs eagerly (XProf reports it on GPU
    captures), or, read from the capture's own events, at least `EAGER_MIN_OPS_PER_STEP` ops a
    step run eagerly and their dispatch takes at least `EAGER_WARNING_PCT` % of the step.
    """
    pct = summary.utilisation.host_eager_pct or 0.0
    eager = summary.eager
    from_events = (
        eager is not None
        and eager.ops_per_step >= EAGER_MIN_OPS_PER_STEP
        and 100 * eager.dispatch_share >= EAGER_WARNING_PCT
    )
    if (pct < EAGER_WARNING_PCT and not from_events) or summary.step_time.count == 0:
        return None
    evidence = EagerExecutionEvidence(
        host_eager_pct=pct, device_eager_pct=summary.utilisation.device_eager_pct
    )
    title = f"{pct:g}% of host op time runs eagerly, one Python call per op"
    if from_events and pct < EAGER_WARNING_PCT:
        pct = round(100 * eager.dispatch_share, 1)
        title = (
            f"{eager.ops_per_step:g} ops a step run eagerly, one Python call each: {pct:g}% of "
            "the step is their dispatch"
        )
        evidence = EagerExecutionEvidence(
            eager_ops_per_step=eager.ops_per_step,
            dispatch_ms_per_step=eager.dispatch_ms_per_step,
            kernel_ms_per_step=eager.kernel_ms_per_step,
            dispatch_share=round(eager.dispatch_share, 4),
            steps_call_tf_functions=eager.in_tf_function,
        )
    return Finding(
        severity=Severity.WARNING,
        title=title,
        evidence=evidence.model_dump(exclude_unset=True),  # the fields of its reading only
        recommendation="Wrap the training step in `@tf.function` (Keras does this unless "
        "`run_eagerly=True`), so TensorFlow runs it as one graph instead of "
        "dispatching every small op from Python.",
        docs="https://www.tensorflow.org/guide/function",
        impact_share=round(_eager_step_share(summary, pct), 4),
    )


def _eager_step_share(summary: Summary, host_op_pct: float) -> float:
    """The step's share in eager dispatch: from the capture's events where they were read,
    else XProf's share of host op time times the host ops' share of the step."""
    if summary.eager is not None and summary.eager.step_ms:
        return min(1.0, summary.eager.dispatch_share)
    st = summary.step_time
    host_ops = share(st.breakdown_avg.host_compute_ms, st.avg_ms)
    return min(1.0, host_op_pct / 100 * host_ops)


@rule("compile_time", evidence=CompileTimeEvidence)
def compile_time(summary: Summary) -> Finding | None:
    """Compilation takes at least `COMPILE_WARNING_SHARE` of the step (a retraced tf.function)."""
    st = summary.step_time
    compile_share = share(st.breakdown_avg.compile_ms, st.avg_ms)
    if compile_share < COMPILE_WARNING_SHARE:
        return None
    return Finding(
        severity=Severity.WARNING,
        title=f"{compile_share:.0%} of step time is compilation",
        evidence=CompileTimeEvidence(
            compile_share=round(compile_share, 4),
            compile_ms_avg=st.breakdown_avg.compile_ms,
        ).model_dump(),
        recommendation="Steps keep compiling: a tf.function retraced for new shapes or Python "
        "values. Give it an `input_signature`, pad to fixed shapes, or pass "
        "tensors instead of Python numbers.",
        docs="https://www.tensorflow.org/guide/function#controlling_retracing",
        impact_share=compile_share,
    )


@rule("no_step_markers", evidence=NoStepMarkersEvidence)
def no_step_markers(summary: Summary) -> Finding | None:
    """The capture has XProf data but no marked step (add `ProfilerStepCallback`)."""
    if summary.step_time.count > 0 or not summary.tools:
        return None
    return Finding(
        severity=Severity.WARNING,
        title="No training steps were marked, so step time cannot be analysed",
        evidence=NoStepMarkersEvidence(steps=0).model_dump(),
        recommendation="Pass `profiler_service.steps.ProfilerStepCallback()` to `model.fit`, or "
        "wrap each step of a custom loop in `training_step(i)`; capture while the "
        "job is training.",
        docs="https://www.tensorflow.org/guide/profiler#profiling_custom_training_loops",
    )


@rule("short_capture", evidence=ShortCaptureEvidence)
def short_capture(summary: Summary) -> Finding | None:
    """Fewer than `MIN_STEPS` steps were captured."""
    if not 0 < summary.step_time.count < MIN_STEPS:
        return None
    return Finding(
        severity=Severity.INFO,
        title=f"Only {summary.step_time.count} steps were captured: the figures are rough",
        evidence=ShortCaptureEvidence(
            steps=summary.step_time.count, step_time_ms_avg=summary.step_time.avg_ms
        ).model_dump(),
        recommendation="Capture for longer (a few seconds more than several steps).",
    )
