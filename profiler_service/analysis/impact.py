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

from profiler_service.analysis.evidence import InputBoundEvidence
from profiler_service.analysis.models import Finding, Impact, Summary

ImpactModel = Callable[[Finding, Summary], Impact]
MODELS: dict[str, ImpactModel] = {}

# tf.data's AUTOTUNE runs a parallel map on at most this many calls however many cores
# the job has (it bounds them by the cores; beyond a few dozen the pipeline's other stages
# bound it).
INPUT_MAX_PARALLELISM = 32
# The cores assumed where the capture was analysed away from the job (`analyze`): the fewest a
# training host has.
INPUT_CORES_ASSUMED = 2.0
# What a parallel, prefetched tf.data pipeline costs beyond its work (its threads, buffers and
# hand-overs): measured on a CPU-bound map made parallel on 2 cores, traced, 1.11-1.23x the
# step its work over the cores gives with oneDNN on (7 fixed twins: 6.9 ms against 6.1 to 7.9
# against 6.4), 0.99-1.37x with it off (a CPU without AVX-512, 5 twins: 9.54 ms against 6.96
# the worst); a margin above the most seen. The least an input fix saves allows for it.
INPUT_PARALLEL_OVERHEAD = 0.5
# Tracing, compiling and recompiling in the steady state: a fixed signature keeps one trace.
TRACING_REMOVED = 0.95
TRACING_REMOVED_MIN = 0.8
# A step that traces again also pays for it outside the events that mark the tracing (the
# function cache's lookups, the concrete function's instantiation, XLA's launch of a new
# executable): the most a fix saves includes this share of the rest of the step. Measured on
# fixed twins: 33 % of the rest (retracing, 15 -> 0.61 ms, 94 % marked) and 74 % (XLA
# recompilation, 350 -> 12 ms, 87 % marked); a margin above the most seen.
TRACING_UNMARKED_SHARE = 0.9
# Python and eager dispatch in and between steps: a graph (tf.function, steps_per_execution)
# keeps some of it (the step's call, callbacks), how much depends on the loop.
HOST_PYTHON_REMOVED = 0.7
HOST_PYTHON_REMOVED_MIN = 0.4
# The GPU's idle time, kernel launches, transfers and communication a fix overlaps or removes.
DEVICE_WAIT_REMOVED = 0.7
DEVICE_WAIT_REMOVED_MIN = 0.4
# A graph runs the same kernels as the eager ops without each op's wrapper: as little as this
# share of their eager run time (`KernelAndDeviceFunc::Run`) stays. Measured on a fixed twin:
# 0.30 ms a step in the graph against 0.67 ms of the eager ops' kernel runs with oneDNN on
# (0.46), 0.87 ms with it off (0.35); a margin below the least seen.
EAGER_KERNEL_KEPT_MIN = 0.2
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
    """The step waits W for each batch (the input share of the step; on a GPU, the share of the
    capture it idled in the tf.data iterator) and computes C = step - W. A pipeline that does
    not run ahead produces while the step waits, so W is its work per batch. Mapped in parallel
    and prefetched, it produces a batch every W * p / P while the step computes: the step after
    the fix is max(C, W * p / P, (W + C) / P), p the slowest iterator's parallelism now, P the
    cores the job can give it (`process_cpu`: its cores less those its other threads keep busy,
    at most `INPUT_MAX_PARALLELISM`): the last term because a pipeline decoding on the CPU takes
    the cores the step would use. The least it saves allows for the parallel pipeline's own
    cost (`INPUT_PARALLEL_OVERHEAD` more), or, where Python decoding holds the GIL, no
    parallelism at all (P = 1), only the overlap with C."""
    now = summary.step_time.avg_ms
    evidence = InputBoundEvidence.model_validate(finding.evidence)
    wait_share = min(max(evidence.input_share_pct / 100, 0.0), 1.0)
    if not now or wait_share <= 0:
        return nothing(summary, "the capture holds no step time to save from")
    wait, compute = now * wait_share, now * (1 - wait_share)
    cores, source = _cores_for_input(summary)
    p_now = min(_slowest_parallelism(summary), cores)
    python = evidence.python_in_pipeline
    # No faster than the step's whole work spread over the cores: a pipeline that decodes on
    # the CPU takes the cores the step would use.
    after = max(compute, wait * p_now / cores, now / cores)
    least = max(compute, wait) if python else min(now, after * (1 + INPUT_PARALLEL_OVERHEAD))
    saving, low = 1 - after / now, 1 - least / now
    on_gpu = evidence.source == "gpu_idle_in_iterator"
    where = "the GPU's idle time in the tf.data iterator" if on_gpu else "the input wait"
    return Impact(
        step_ms_now=now,
        step_ms_after=round(after, 3),
        saving_share=round(saving, 4),
        saving_range=(round(min(low, saving), 4), round(max(saving, wait_share), 4)),
        basis=(
            f"The fix runs the pipeline ahead of the step: {where} ({wait:.3g} ms of "
            f"{now:.3g}) becomes its work spread over {cores:g} parallel call(s) ({source}), "
            f"{wait * p_now / cores:.3g} ms a batch, beside the step's own {compute:.3g} ms."
            + (" Python decoding that holds the GIL would gain only the overlap." if python else "")
        ),
    )


def _slowest_parallelism(summary: Summary) -> float:
    """The parallelism of the iterator that takes the most time (1: sequential)."""
    iterators = summary.input_pipeline.iterators
    if not iterators:
        return 1.0
    slowest = max(iterators, key=lambda i: i.self_time_ms)
    return float(slowest.parallelism or 1)


def _cores_for_input(summary: Summary) -> tuple[float, str]:
    """The parallel calls a pipeline can use: the job's cores less those its threads keep busy
    besides the one the sequential pipeline uses, at least 1, at most
    `INPUT_MAX_PARALLELISM`; `INPUT_CORES_ASSUMED` where they are unknown."""
    cpu = summary.process_cpu
    if cpu is None:  # `analyze` of a capture taken elsewhere
        return INPUT_CORES_ASSUMED, f"the job's cores unknown: {INPUT_CORES_ASSUMED:g} assumed"
    free = cpu.cores_available
    if cpu.cores_used is not None:
        free = min(free, cpu.cores_available - cpu.cores_used + 1)
    where = {"agent": "the job's cores", "proc": "the job's cores"}.get(
        cpu.source, "this host's cores"
    )
    return max(1.0, min(free, INPUT_MAX_PARALLELISM)), where


@impact_of("retracing", "xla_recompilation", "compile_time")
def tracing(finding: Finding, summary: Summary) -> Impact:
    """The share of step time spent tracing or compiling graphs again (`impact_share`): a fixed
    signature or fixed shapes keep one trace, so `TRACING_REMOVED` of it is saved, at least
    `TRACING_REMOVED_MIN`; at most all of it and `TRACING_UNMARKED_SHARE` of the rest of the
    step, which pays for the retrace outside the events that mark it."""
    at_stake = finding.impact_share
    impact = removed(
        summary,
        at_stake,
        TRACING_REMOVED,
        TRACING_REMOVED_MIN,
        f"The fix keeps one trace: the {at_stake:.0%} of step time spent building "
        "and compiling graphs again goes, less the rare trace a new input still costs.",
    )
    most = min(1.0, at_stake + (1 - at_stake) * TRACING_UNMARKED_SHARE)
    impact.saving_range = (impact.saving_range[0], round(most, 4))
    return impact


@impact_of("eager_execution")
def eager_dispatch(finding: Finding, summary: Summary) -> Impact:
    """Read from the capture's own events (`summary.eager`): a tf.function keeps the eager ops'
    kernels and drops their dispatch. A step that calls no tf.function is eager throughout: the
    graph keeps only the kernels, and the Python around them goes too; the least it saves keeps
    that Python; the most, the kernels run without their eager wrappers
    (`EAGER_KERNEL_KEPT_MIN` of their time). Where XProf gave only the eager share of op time
    (GPUs), as `host_python`."""
    eager, now = summary.eager, summary.step_time.avg_ms
    if eager is None or not now or not eager.step_ms:
        return host_python(finding, summary)
    scale = now / eager.step_ms  # the marked steps' own time against XProf's per step
    dispatch, kernels = eager.dispatch_ms_per_step * scale, eager.kernel_ms_per_step * scale
    kept_python = now - dispatch
    least = now - dispatch + kernels
    after = kernels if not eager.in_tf_function else least
    return Impact(
        step_ms_now=now,
        step_ms_after=round(after, 3),
        saving_share=round(1 - after / now, 4),
        saving_range=(
            round(1 - least / now, 4),
            round(1 - kernels * EAGER_KERNEL_KEPT_MIN / now, 4),
        ),
        basis=(
            f"The fix runs the {eager.ops_per_step:g} eager ops of each step as one graph: "
            f"their dispatch ({dispatch:.3g} ms a step) goes, their kernels ({kernels:.3g} ms) "
            "stay"
            + (
                f", and the Python between them ({kept_python:.3g} ms) is traced away too."
                if not eager.in_tf_function
                else "; the step's tf.function calls and the Python around them stay."
            )
        ),
    )


@impact_of("host_overhead", "between_steps")
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


@impact_of("op_dominates", "no_step_markers", "short_capture", "device_trace_missing")
def unmeasured(finding: Finding, summary: Summary) -> Impact:
    """Where to look, or how to capture better: no saving can be predicted from the capture."""
    return nothing(summary, "it says where to look or how to capture, not what a fix removes")
