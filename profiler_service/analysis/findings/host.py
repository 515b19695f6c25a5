"""The host: "All Others" time, the loop between steps, compiles, the steps marked and the
capture's length (eager execution: eager.py); each rule with its evidence, what its fix saves
and its advice for JAX."""

from __future__ import annotations

from pydantic import Field

from profiler_service.analysis.findings.advice import JAX_INPUT, JAX_STEP, JAX_SYNC, Advice
from profiler_service.analysis.findings.impact import removed, unmeasured
from profiler_service.analysis.findings.input_pipeline import gpu_input_verdict
from profiler_service.analysis.findings.registry import rule, share
from profiler_service.analysis.findings.tensorflow import compiling
from profiler_service.analysis.models import (
    Finding,
    Impact,
    InputBound,
    Severity,
    Summary,
)
from profiler_service.analysis.rule import Evidence, Rule


class HostOverheadEvidence(Evidence):
    """host_overhead: XProf's "All Others" time (Python, I/O between TF ops) in the step."""

    all_others_share: float = Field(description="its share (0-1) of step time")
    all_others_ms_avg: float = Field(description="its mean time a step, in milliseconds")
    step_time_ms_avg: float = Field(description="the mean step time")


class BetweenStepsEvidence(Evidence):
    """between_steps: the training loop's own Python, from one marked step's end to the next
    one's start."""

    between_steps_share: float = Field(description="its share (0-1) of each step")
    between_steps_ms_avg: float = Field(description="its mean time a step, in milliseconds")
    step_time_ms_avg: float = Field(description="the mean step time")
    steps_per_marker: int = Field(description="the training steps each marked step runs")


class CompileTimeEvidence(Evidence):
    """compile_time: compilation in the step (XProf's figure)."""

    compile_share: float = Field(description="its share (0-1) of step time")
    compile_ms_avg: float = Field(description="its mean time a step, in milliseconds")


class NoStepMarkersEvidence(Evidence):
    """no_step_markers: the capture marked no training step."""

    steps: int = Field(description="the steps marked: 0")


class ShortCaptureEvidence(Evidence):
    """short_capture: too few steps for steady figures."""

    steps: int = Field(description="the steps the capture marked")
    step_time_ms_avg: float | None = Field(description="their mean time")


# Python and eager dispatch in and between steps: a graph (tf.function, steps_per_execution)
# keeps some of it (the step's call, callbacks), how much depends on the loop.
HOST_PYTHON_REMOVED = 0.7
HOST_PYTHON_REMOVED_MIN = 0.4


def host_python(finding: Finding, summary: Summary) -> Impact:
    """The share of step time in Python and eager dispatch on the host (`impact_share`: 'All
    Others' time, the loop between markers, eager ops): a graph keeps the step's call and the
    callbacks, so `HOST_PYTHON_REMOVED` of it is saved, at least `HOST_PYTHON_REMOVED_MIN`."""
    return removed(
        summary,
        finding.impact_share,
        HOST_PYTHON_REMOVED,
        HOST_PYTHON_REMOVED_MIN,
        f"The fix moves the {finding.impact_share:.0%} of step time the host spends in Python "
        "and eager dispatch into a graph; the step's call and callbacks remain: "
        f"{HOST_PYTHON_REMOVED:.0%} of it saved.",
    )


def _jax_all_others_title(finding: Finding, summary: Summary) -> str:
    return (
        f"{finding.impact_share:.0%} of step time is 'All Others' time: Python or I/O between "
        "the jitted computations"
    )


HOST_OVERHEAD_ADVICE = Advice(
    jax=f"The host runs Python between the device's work: {JAX_STEP}, and {JAX_SYNC}.",
    jax_title=_jax_all_others_title,
)

BETWEEN_STEPS_ADVICE = Advice(
    jax="Look at what the loop does between the jitted steps: Python data loading "
    f"or conversion ({JAX_INPUT}), logging, metrics or checkpoints every step; {JAX_SYNC}. "
    "Short steps: run several per call with `jax.lax.scan`.",
    keras3_jax="Run several steps per call, `model.compile(..., steps_per_execution=N)` "
    "with N of 8 to 100, and look for per-step Python in callbacks (logging, metrics, "
    "checkpoints every step).",
)


COMPILE_TIME_ADVICE = Advice(
    jax="Steps keep compiling: `jax.jit` compiles for every new input shape or "
    "static argument: pad to fixed shapes, keep static arguments few, and cache compilations "
    "across runs (`jax.config.update('jax_compilation_cache_dir', ...)`).",
)

NO_STEP_MARKERS_ADVICE = Advice(
    jax="Mark each step: `with jax.profiler.StepTraceAnnotation('train', "
    "step_num=i): state = train_step(state, batch)`; capture while the job is training.",
    keras3_jax="Pass `profiler_service.steps.ProfilerStepCallback()` to `model.fit`; "
    "capture while the job is training.",
)


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
COMPILE_WARNING_SHARE = 0.10
MIN_STEPS = 3


@rule(
    Rule.HOST_OVERHEAD,
    evidence=HostOverheadEvidence,
    impact=host_python,
    advice=HOST_OVERHEAD_ADVICE,
)
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


@rule(
    Rule.BETWEEN_STEPS,
    evidence=BetweenStepsEvidence,
    impact=host_python,
    advice=BETWEEN_STEPS_ADVICE,
)
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


@rule(
    Rule.COMPILE_TIME,
    evidence=CompileTimeEvidence,
    impact=compiling,
    advice=COMPILE_TIME_ADVICE,
)
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


@rule(
    Rule.NO_STEP_MARKERS,
    evidence=NoStepMarkersEvidence,
    impact=unmeasured,
    advice=NO_STEP_MARKERS_ADVICE,
)
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


@rule(
    Rule.SHORT_CAPTURE,
    evidence=ShortCaptureEvidence,
    impact=unmeasured,
)
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
