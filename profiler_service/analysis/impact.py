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

from profiler_service.analysis.gpu_models import Vendor, compute_capability, sixteen_bit_time
from profiler_service.analysis.input_impact import input_wait
from profiler_service.analysis.models import Finding, HostActivity, Impact, Summary

ImpactModel = Callable[[Finding, Summary], Impact]
MODELS: dict[str, ImpactModel] = {}

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
# A memory-bound kernel in 16 bits moves half the bytes: half its time (the least a 32-bit
# matmul gains; the other kernels' most).
MEMORY_BOUND_TIME = 0.5
# 16-bit kernels at a job's own shapes reach the data sheet's ratio only roughly (each kind of
# kernel reaches its own share of its peak): the range allows this share of a kernel's time
# either way. Measured on the one GPU pair held (H200, the jax-h200 fixtures fp32_matmul ->
# bf16_matmul): TF32 matmuls 10.70 ms a step, in BF16 5.41 ms, 0.505 of their time against
# the sheet's 0.5, and the step 47 % shorter (12.12 -> 6.42 ms) where 45 % (36-56 %) is
# predicted. One pair: the calibration corpus (issue 48) is to fit it.
SIXTEEN_BIT_SPREAD = 0.1
# Faster kernels shorten the step only where the GPU bounds it: busy under this share of the
# capture, it mostly waits for the host.
GPU_BOUND_BUSY_SHARE = 0.5


def impact_of(*rules: str) -> Callable[[ImpactModel], ImpactModel]:
    """Register the model of what fixing `rules`' findings saves."""

    def register(model: ImpactModel) -> ImpactModel:
        for name in rules:
            if name in MODELS:
                raise ValueError(f"impact model for {name!r} registered twice")
            MODELS[name] = model
        return model

    return register


impact_of("input_bound")(input_wait)  # its model, per change: input_impact.py


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


@impact_of("device_idle")
def device_idle(finding: Finding, summary: Summary) -> Impact:
    """The device's idle time, less what the GPU idled while the host waited on tf.data (what
    its plane shows the host did meanwhile): that part is the input pipeline's, predicted per
    change by `input_bound`'s model; the rest as `device_wait`."""
    gpu = summary.gpu
    on_input = 0.0
    if gpu is not None and gpu.active:
        on_input = sum(gpu.idle_while(a) for a in (HostActivity.INPUT, HostActivity.TF_DATA))
    if on_input <= 0:
        return device_wait(finding, summary)
    rest = max(0.0, finding.impact_share - on_input / 100)
    impact = device_wait(finding.model_copy(update={"impact_share": rest}), summary)
    impact.basis += (
        f" The {on_input / 100:.0%} of the capture it idled while the host waited on tf.data is "
        "the input pipeline's (input_bound's prediction)."
    )
    return impact


@impact_of(
    "kernel_launch_bound",
    "host_device_transfer",
    "communication_bound",
    "straggler",
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


@impact_of("gpu_imbalance")
def gpu_imbalance(finding: Finding, summary: Summary) -> Impact:
    """GPUs that ran no kernel lengthen nobody's step: what they cost is the GPU-hours the job
    holds them for, all of which a job that gives them back returns (`returned_gpu_share`, of
    the GPUs it holds: a count, so no range). Unevenly busy GPUs in a synchronous job wait for
    the busiest at each step: shared evenly, each does the mean work, so the step saves
    1 - mean busy / most busy where the GPUs bound it (`impact_share`), at least half that
    (what else runs on the busiest may stay)."""
    gpu, now = summary.gpu, summary.step_time.avg_ms
    unused = [d for d in gpu.devices if not d.kernels.count] if gpu else []
    if gpu is not None and unused:
        returned = len(unused) / len(gpu.devices)
        impact = nothing(summary, "GPUs that run nothing lengthen no step")
        impact.returned_gpu_share = round(returned, 4)
        impact.basis = (
            f"The fix gives back the {len(unused)} of {len(gpu.devices)} GPUs that ran no "
            f"kernel: {returned:.0%} of the GPU-hours the job holds, with its step as long."
        )
        return impact
    at_stake = finding.impact_share
    return removed(
        summary,
        at_stake,
        1.0,
        0.5,
        f"Every replica waits for the busiest GPU each step: shared evenly, the step is "
        f"{at_stake:.0%} shorter{f' ({now * at_stake:.3g} ms)' if now else ''}.",
    )


@impact_of("mixed_precision", "tensor_cores_unused")
def mixed_precision(finding: Finding, summary: Summary) -> Impact:
    """The step's 32-bit matmul and convolution kernels take M of it (the GPU with the most of
    them: their time over its window). In 16 bits a compute-bound kernel takes r of its time,
    the GPU's data-sheet ratio of 32-bit to 16-bit dense throughput (`sixteen_bit_time`: 0.5
    for TF32 on Tensor Cores, 0.04-0.25 for FP32 on CUDA cores); a memory-bound one half
    (`MEMORY_BOUND_TIME`: half the bytes). The step after is step - M (1 - r), the GPU being
    what bounds it. Point: r on the matrix units; off them, between the two bounds (their
    geometric mean: the capture does not say yet which bound a kernel meets). Least: r +
    `SIXTEEN_BIT_SPREAD` (off the units: the memory bound's), and nothing at all where the GPU
    is busy under half the capture (it waits for the host, and faster kernels would wait
    longer). Most: r - `SIXTEEN_BIT_SPREAD` (off the units: the compute bound's), and the
    other kernels' time halved too (16-bit activations halve their bytes)."""
    now = summary.step_time.avg_ms
    parts = _thirty_two_bit_parts(summary)
    if not now or parts is None:
        return removed(
            summary,
            finding.impact_share,
            MEMORY_BOUND_TIME,
            0.0,
            f"The fix runs the {finding.impact_share:.0%} of step time in 32-bit matmuls in "
            "16 bits; the GPU is not identified, so at most all of it, about half, is saved.",
        )
    on, off, other, busy, (r_on, r_off, figures), model = parts
    r_off_point = (r_off * MEMORY_BOUND_TIME) ** 0.5
    point = on * (1 - r_on) + off * (1 - r_off_point)
    most = (
        on * (1 - max(0.0, r_on - SIXTEEN_BIT_SPREAD))
        + off * (1 - r_off)
        + other * (1 - MEMORY_BOUND_TIME)
    )
    least = on * (1 - min(1.0, r_on + SIXTEEN_BIT_SPREAD)) + off * (
        1 - min(1.0, MEMORY_BOUND_TIME + SIXTEEN_BIT_SPREAD)
    )
    if busy < GPU_BOUND_BUSY_SHARE:
        least = 0.0
    where = " and ".join(
        text
        for share, text in (
            (on, f"{on:.0%} on the matrix units (TF32: about {r_on:g}x as long in 16 bits)"),
            (off, f"{off:.0%} off them (FP32: {r_off:g}x to {MEMORY_BOUND_TIME:g}x as long)"),
        )
        if share > 0
    )
    return Impact(
        step_ms_now=now,
        step_ms_after=round(now * (1 - point), 3),
        saving_share=round(point, 4),
        saving_range=(round(least, 4), round(max(most, point), 4)),
        basis=(
            f"The fix runs the step's 32-bit matmuls and convolutions in 16 bits on the "
            f"{model}: {where} of step time ({figures})."
            + (
                f" The GPU is busy {busy:.0%} of the capture: faster kernels may only wait "
                "longer for the host."
                if busy < GPU_BOUND_BUSY_SHARE
                else ""
            )
        ),
    )


def _thirty_two_bit_parts(
    summary: Summary,
) -> tuple[float, float, float, float, tuple[float, float, str], str] | None:
    """The GPU with the most 32-bit matmul time: its shares of the window in 32-bit matmuls on
    and off the matrix units and in other kernels, its busy share, its 16-bit ratios, its name;
    None where the capture names no GPU with 16-bit matrix units."""
    gpu = summary.gpu
    if gpu is None or not gpu.active:
        return None

    def thirty_two_bit(d) -> float:
        return d.kernels.tensor_core_eligible_ms - d.kernels.sixteen_bit_ms

    device = max(gpu.active, key=thirty_two_bit)
    cc = compute_capability(device.compute_capability)
    ratios = sixteen_bit_time(Vendor(device.vendor), cc) if cc else None
    if ratios is None or not device.window_ms:
        return None
    k, window = device.kernels, device.window_ms
    on = max(0.0, k.tensor_core_ms - k.sixteen_bit_ms) / window
    off = max(0.0, k.tensor_core_eligible_ms - k.tensor_core_ms) / window
    other = max(0.0, k.total_ms - k.tensor_core_eligible_ms) / window
    model = device.model or f"GPU (compute capability {device.compute_capability})"
    return on, off, other, device.busy_pct / 100, ratios, model


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
