"""What a finding costs and what its fix would save: `finding.impact`.

Each rule's finding says which share of step time is at stake (`impact_share`: the input wait,
the tracing time, the idle GPU...). A fix does not give all of it back: what remains after it is
the model, one function per rule below, named after it, whose docstring states it. The saving is
a point and a range (`saving_range`), the step time predicted after the fix follows from the
point, and `basis` says in one sentence what the fix removes and what remains.

Where a rule has no model, or its finding is about memory rather than time, the saving is 0 and
says so: it ranks last (`rank`).

The factors are named constants, each with where it comes from. They are starting points to be
checked against fixed twins (issue 37's pairs), not measurements of every job: the range is there
because the same fix saves more or less depending on what the job does meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler_service.analysis.models import Finding, Impact, Summary

ImpactModel = Callable[[Finding, Summary], Impact]
MODELS: dict[str, ImpactModel] = {}

# An input pipeline that runs ahead of the step (parallel map, prefetch) still hands each batch
# over, and its work still takes CPU the step may want: the share of the wait a fix removes.
INPUT_WAIT_REMOVED = 0.9
# With Python in the pipeline its decoding competes with the step's own Python for the GIL
# even once it runs ahead: this much of what a fix removes is kept.
PYTHON_PIPELINE_REMOVED = 0.85
# Where the pipeline's work competes with the step for the host's cores (a job already using
# them): the least of the wait a fix removes.
INPUT_WAIT_REMOVED_MIN = 0.5
# Tracing, compiling and recompiling in the steady state: a fixed signature keeps one trace.
TRACING_REMOVED = 0.95
TRACING_REMOVED_MIN = 0.8
# Python and eager dispatch in and between steps: a graph (tf.function, steps_per_execution)
# keeps some of it (the step's call, callbacks), how much depends on the loop.
HOST_PYTHON_REMOVED = 0.7
HOST_PYTHON_REMOVED_MIN = 0.4
# The GPU's idle time, kernel launches, transfers and communication a fix overlaps or removes.
DEVICE_WAIT_REMOVED = 0.7
DEVICE_WAIT_REMOVED_MIN = 0.4
# 16-bit matmuls on Tensor Cores: about half the 32-bit time of the ops that move.
MIXED_PRECISION_REMOVED = 0.5
MIXED_PRECISION_REMOVED_MIN = 0.25


def impact_of(*rules: str) -> Callable[[ImpactModel], ImpactModel]:
    """Register the model of what fixing `rules`' findings saves."""

    def register(model: ImpactModel) -> ImpactModel:
        for name in rules:
            if name in MODELS:
                raise ValueError(f"impact model for {name!r} registered twice")
            MODELS[name] = model
        return model

    return register


def estimate(finding: Finding, summary: Summary) -> Impact:
    """The finding's impact by its rule's model, or no measurable saving."""
    model = MODELS.get(finding.rule)
    if model is None:
        return nothing(summary, "no model of what this fix saves in step time")
    return model(finding, summary)


def rank(finding: Finding) -> tuple[float, int, str]:
    """Most saved first; then the most severe; a finding that saves nothing measurable last."""
    saving = finding.impact.saving_share if finding.impact is not None else 0.0
    return (-saving, finding.severity.rank, finding.rule)


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


def nothing(summary: Summary, why: str) -> Impact:
    now = summary.step_time.avg_ms
    return Impact(
        step_ms_now=now,
        step_ms_after=now,
        saving_share=0.0,
        saving_range=(0.0, 0.0),
        basis=f"Saves nothing measurable in step time: {why}.",
    )


@impact_of("input_bound")
def input_wait(finding: Finding, summary: Summary) -> Impact:
    """The step's wait for input (XProf's input share, or on a GPU the share of the capture it
    idled in the tf.data iterator) less what a pipeline that runs ahead still costs:
    `INPUT_WAIT_REMOVED` of the wait, times `PYTHON_PIPELINE_REMOVED` with Python in the
    pipeline; at least `INPUT_WAIT_REMOVED_MIN` where its work competes for the cores."""
    wait = (finding.evidence.get("input_share_pct") or 0.0) / 100
    python = bool(finding.evidence.get("python_in_pipeline"))
    point = INPUT_WAIT_REMOVED * (PYTHON_PIPELINE_REMOVED if python else 1.0)
    where = "the GPU's idle time in the tf.data iterator" if _on_gpu(finding) else "the input wait"
    return removed(
        summary,
        wait,
        point,
        INPUT_WAIT_REMOVED_MIN,
        f"The fix hides {where} ({wait:.0%} of the step) behind the step; a pipeline that runs "
        f"ahead still hands over each batch and takes CPU"
        + (", and its Python competes with the step's for the GIL" if python else "")
        + f": {point:.0%} of it saved.",
    )


@impact_of("retracing", "xla_recompilation", "compile_time")
def tracing(finding: Finding, summary: Summary) -> Impact:
    """The share of step time spent tracing or compiling graphs again (`impact_share`): a fixed
    signature or fixed shapes keep one trace, so `TRACING_REMOVED` of it is saved, at least
    `TRACING_REMOVED_MIN`."""
    return removed(
        summary,
        finding.impact_share,
        TRACING_REMOVED,
        TRACING_REMOVED_MIN,
        f"The fix keeps one trace: the {finding.impact_share:.0%} of step time spent building "
        "and compiling graphs again goes, less the rare trace a new input still costs.",
    )


@impact_of("host_overhead", "between_steps", "eager_execution")
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


@impact_of(
    "device_idle",
    "kernel_launch_bound",
    "host_device_transfer",
    "communication_bound",
    "straggler",
    "gpu_imbalance",
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
        busy = 1 - gpu.idle_pct / 100
        after = min(1.0, busy / (1 - impact.saving_share)) if impact.saving_share < 1 else 1.0
        impact.basis += f" The GPUs, busy {busy:.0%} now, would be busy {after:.0%}."
    return impact


@impact_of("mixed_precision", "tensor_cores_unused")
def mixed_precision(finding: Finding, summary: Summary) -> Impact:
    """The 32-bit matmul and convolution time on Tensor-Core GPUs (`impact_share`): in 16 bits
    they take about half, `MIXED_PRECISION_REMOVED`, at least `MIXED_PRECISION_REMOVED_MIN`."""
    return removed(
        summary,
        finding.impact_share,
        MIXED_PRECISION_REMOVED,
        MIXED_PRECISION_REMOVED_MIN,
        f"The fix runs the {finding.impact_share:.0%} of step time in 32-bit matmuls on Tensor "
        "Cores in 16 bits, about half as long.",
    )


@impact_of(
    "memory_growth",
    "memory_pressure",
    "memory_fragmentation",
    "memory_temporaries",
    "step_temporaries",
)
def memory(finding: Finding, summary: Summary) -> Impact:
    """Memory findings keep a job alive or let it grow its batch; they save no step time."""
    return nothing(summary, "this fix is about memory (an OOM avoided, a larger batch possible)")


@impact_of("op_dominates", "no_step_markers", "short_capture")
def unmeasured(finding: Finding, summary: Summary) -> Impact:
    """Where to look, or how to capture better: no saving can be predicted from the capture."""
    return nothing(summary, "it says where to look or how to capture, not what a fix removes")


def _on_gpu(finding: Finding) -> bool:
    return finding.evidence.get("source") == "gpu_idle_in_iterator"
