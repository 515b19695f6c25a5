"""Eager execution: ops run one by one from Python, by XProf's figure or read from the capture's
own events (readers/eager_dispatch.py); the rule with its evidence, what running them as one
graph saves and its advice for JAX."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from profiler_service.analysis.findings.advice import JAX_STEP, Advice
from profiler_service.analysis.findings.host import host_python
from profiler_service.analysis.findings.impact import spread_about
from profiler_service.analysis.findings.registry import rule, share
from profiler_service.analysis.models import (
    Finding,
    Impact,
    Severity,
    Summary,
)
from profiler_service.analysis.renamed_fields import percent
from profiler_service.analysis.rule import Evidence, Rule


class EagerExecutionEvidence(Evidence):
    """eager_execution: ops run eagerly, by XProf's figure (the first two fields) or read from
    the capture's own events (the others)."""

    old_percentages: ClassVar[dict[str, str]] = {
        "host_eager_pct": "host_eager_share",
        "device_eager_pct": "device_eager_share",
    }

    host_eager_share: float | None = Field(
        None, description="from XProf: the share of host op time run eagerly (0-1)"
    )
    device_eager_share: float | None = Field(
        None, description="from XProf: the share of device op time run eagerly (0-1)"
    )
    eager_ops_per_step: float | None = Field(
        None, description="from the events: the ops a step runs eagerly"
    )
    dispatch_ms_per_step: float | None = Field(
        None,
        description="from the events: a step's time in those ops' Python entries and dispatch, "
        "kernels included",
    )
    kernel_ms_per_step: float | None = Field(
        None, description="from the events: a step's time in their kernels (what a graph keeps)"
    )
    dispatch_share: float | None = Field(
        None, description="from the events: the dispatch's share (0-1) of the step"
    )
    steps_call_tf_functions: bool | None = Field(
        None,
        description="from the events: the steps also call tf.functions (the eager ops are "
        "around them)",
    )


# A graph runs the eager ops' kernels without each op's eager wrapper, whose run
# (`KernelAndDeviceOp::Run`) holds a fixed cost besides the kernel's work, and runs the kernels
# themselves faster (fused by Grappler, no eager allocation per op): the fix keeps
# `EAGER_KERNEL_KEPT` of the kernels' time less `EAGER_OP_OVERHEAD_MS` an op. Fitted by least
# squares over the 17 eager pairs of bench/calibration/corpus-steps.json, -2 and -3
# (`bench_calibration.fit_steps`: each pair's step after the fix, by the job's clock scaled to
# the captured step, against its kernels' time and its ops a step); reported on
# corpus-steps-4.json, which it was not fitted on.
EAGER_KERNEL_KEPT = 0.864
EAGER_OP_OVERHEAD_MS = 0.01219
# The range: the point plus the spread of measured - predicted savings over those pairs that
# holds 80 % of them (split conformal, as the input model's).
EAGER_SAVING_SPREAD = (-0.07, 0.143)
# However many ops go, the kernels' own work stays: at least this share of their eager time.
EAGER_KERNEL_KEPT_MIN = 0.05


def eager_dispatch(finding: Finding, summary: Summary) -> Impact:
    """Read from the capture's own events (`summary.eager`): a tf.function keeps
    `EAGER_KERNEL_KEPT` of the eager ops' kernels' time, less each op's eager wrapper
    (`EAGER_OP_OVERHEAD_MS` an op; both fitted), and drops their dispatch. A step that calls no
    tf.function is eager throughout: the graph keeps only the kernels, and the Python around
    them goes too; one that calls tf.functions keeps them and the Python around the eager ops.
    The range is the point plus `EAGER_SAVING_SPREAD`, which held 80 % of the fitted pairs.
    Where XProf gave only the eager share of op time (GPUs), as `host_python`."""
    eager, now = summary.eager, summary.step_time.avg_ms
    if eager is None or not now or not eager.step_ms:
        return host_python(finding, summary)
    scale = now / eager.step_ms  # the marked steps' own time against XProf's per step
    dispatch, kernels = eager.dispatch_ms_per_step * scale, eager.kernel_ms_per_step * scale
    kept_python = now - dispatch if eager.in_tf_function else 0.0
    kept = max(
        kernels * EAGER_KERNEL_KEPT - eager.ops_per_step * EAGER_OP_OVERHEAD_MS,
        kernels * EAGER_KERNEL_KEPT_MIN,
    )
    point = kept_python + kept
    saving = 1 - point / now
    return Impact(
        step_ms_now=now,
        step_ms_after=round(point, 3),
        saving_share=round(saving, 4),
        saving_range=spread_about(saving, EAGER_SAVING_SPREAD),
        basis=(
            f"The fix runs the {eager.ops_per_step:g} eager ops of each step as one graph: "
            f"their dispatch ({dispatch:.3g} ms a step) goes; their kernels ({kernels:.3g} ms) "
            f"stay, run about {1 - EAGER_KERNEL_KEPT:.0%} faster in a graph, less about "
            f"{1000 * EAGER_OP_OVERHEAD_MS:.3g} µs an op of eager wrapper"
            + (
                "; the step's tf.function calls and the Python around them stay."
                if eager.in_tf_function
                else f", and the Python between them ({now - dispatch:.3g} ms) is traced away."
            )
        ),
    )


EAGER_EXECUTION_ADVICE = Advice(
    jax=f"Ops run one by one from Python: {JAX_STEP}; outside `jax.jit` every "
    "`jnp` call is dispatched on its own.",
)


EAGER_WARNING_SHARE = 0.10
# Ops a step runs eagerly, read from the capture's own events, before their dispatch counts.
EAGER_MIN_OPS_PER_STEP = 10


@rule(
    Rule.EAGER_EXECUTION,
    evidence=EagerExecutionEvidence,
    impact=eager_dispatch,
    advice=EAGER_EXECUTION_ADVICE,
)
def eager_execution(summary: Summary) -> Finding | None:
    """At least `EAGER_WARNING_SHARE` of host op time runs eagerly (XProf reports it on GPU
    captures), or, read from the capture's own events, at least `EAGER_MIN_OPS_PER_STEP` ops a
    step run eagerly and their dispatch takes at least `EAGER_WARNING_SHARE` of the step.
    """
    host_eager = summary.utilisation.host_eager_share or 0.0
    pct = percent(host_eager)
    eager = summary.eager
    from_events = (
        eager is not None
        and eager.ops_per_step >= EAGER_MIN_OPS_PER_STEP
        and eager.dispatch_share >= EAGER_WARNING_SHARE
    )
    if (host_eager < EAGER_WARNING_SHARE and not from_events) or summary.step_time.count == 0:
        return None
    evidence = EagerExecutionEvidence(
        host_eager_share=summary.utilisation.host_eager_share,
        device_eager_share=summary.utilisation.device_eager_share,
    )
    title = f"{pct:g}% of host op time runs eagerly, one Python call per op"
    if from_events and host_eager < EAGER_WARNING_SHARE:
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
        impact_share=round(_eager_step_share(summary, host_eager), 4),
    )


def _eager_step_share(summary: Summary, host_op_share: float) -> float:
    """The step's share in eager dispatch: from the capture's events where they were read,
    else XProf's share of host op time times the host ops' share of the step."""
    if summary.eager is not None and summary.eager.step_ms:
        return min(1.0, summary.eager.dispatch_share)
    st = summary.step_time
    host_ops = share(st.breakdown_avg.host_compute_ms, st.avg_ms)
    return min(1.0, host_op_share * host_ops)
