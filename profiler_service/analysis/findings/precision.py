"""Precision on GPUs with 16-bit matrix units: 32-bit matmuls and convolutions (mixed_precision,
from the GPU's own plane or XProf's figure; tensor_cores_unused, from XProf's kernel stats), and
what computing them in 16 bits saves; each rule with its evidence and its advice for JAX."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from profiler_service.analysis.findings.advice import Advice
from profiler_service.analysis.findings.impact import removed
from profiler_service.analysis.findings.registry import rule, share
from profiler_service.analysis.gpu_models import Vendor, compute_capability, sixteen_bit_time
from profiler_service.analysis.models import (
    Finding,
    Impact,
    Severity,
    Summary,
)
from profiler_service.analysis.rule import Evidence, Rule


class MixedPrecisionEvidence(Evidence):
    """mixed_precision: a GPU with Tensor Cores computing in 32-bit, by XProf's figure or by
    the kernels' own names."""

    old_percentages: ClassVar[dict[str, str]] = {"kernel_pct": "kernel_share"}

    gpu: str | None = Field(description="the GPU's model, where the capture identifies it")
    compute_capability: str = Field(description="its compute capability (7.0 and up)")
    device_compute_16bit_pct: float | None = Field(
        description="XProf's share of device compute in 16-bit, in %"
    )
    device_compute_32bit_pct: float | None = Field(
        description="XProf's share of device compute in 32-bit, in %"
    )
    xprof_statement: str | None = Field(description="XProf's own sentence on precision")
    tensor_core_eligible_ms: float = Field(
        description="the active GPUs' time in matmul and convolution kernels"
    )
    tensor_core_ms: float = Field(description="the part of it on Tensor Cores")
    sixteen_bit_kernel_ms: float = Field(
        description="the part of it in kernels whose names say 16-bit"
    )
    kernel_share: float = Field(
        description="the largest share (0-1) of the capture an active GPU ran kernels"
    )


class TensorCoresUnusedEvidence(Evidence):
    """tensor_cores_unused: kernel time that could run on Tensor Cores and does not."""

    eligible_unused_share: float = Field(
        description="the share (0-1) of kernel time in Tensor-Core-eligible ops whose kernels "
        "do not use them (XProf's kernel stats)"
    )
    ops: list[str] = Field(description="up to five such ops, from XProf's top kernels")


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


def mixed_precision_saving(finding: Finding, summary: Summary) -> Impact:
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
    return on, off, other, device.busy_share, ratios, model


MIXED_PRECISION_ADVICE = Advice(
    jax="Compute in bfloat16: keep the parameters in float32 and cast them and "
    "the inputs to `jnp.bfloat16` inside the jitted step (Flax: `dtype=jnp.bfloat16`, "
    "`param_dtype=jnp.float32`), and keep matmul and convolution dimensions multiples of 8.",
    keras3_jax="Compute in bfloat16: `keras.mixed_precision.set_global_policy("
    '"mixed_bfloat16")` before building the model (the variables stay float32), and keep '
    "matmul and convolution dimensions multiples of 8.",
)


TENSOR_CORES_UNUSED_ADVICE = Advice(
    jax="Compute the matmuls and convolutions in bfloat16 (cast inside the "
    "jitted step; Flax `dtype=jnp.bfloat16`), and keep their dimensions multiples of 8.",
)


# Tensor Cores arrive with compute capability 7.0 (Volta); older GPUs gain little from 16-bit.
TENSOR_CORE_MIN_CC = (7, 0)
# XProf's own line (kLowPrecisionPercentThreshold, 10 %), as a share: under this share of device
# compute in 16-bit, it says "Only x% of device computation is 16 bit".
LOW_16BIT_SHARE = 0.10
# Without XProf's figure: under this share of Tensor-Core-eligible kernel time on Tensor Cores.
LOW_TENSOR_CORE_SHARE = 0.10
# Mixed precision is worth a warning once the GPU computes for at least this share of the
# capture; below it the GPU mostly waits, and the advice is info.
PRECISION_WARNING_KERNEL_SHARE = 0.50
TENSOR_CORE_UNUSED_SHARE = 0.10


@rule(
    Rule.MIXED_PRECISION,
    evidence=MixedPrecisionEvidence,
    impact=mixed_precision_saving,
    advice=MIXED_PRECISION_ADVICE,
)
def mixed_precision(summary: Summary) -> Finding | None:
    """A GPU with Tensor Cores (compute capability 7.0 and up) computes in 32-bit: under
    `LOW_16BIT_SHARE` of device compute in 16-bit (XProf's figure), or, where XProf gives
    none, under `LOW_TENSOR_CORE_SHARE` of matmul/convolution kernel time on Tensor Cores.
    Warning once kernels run `PRECISION_WARNING_KERNEL_SHARE` of the capture, else info.
    Silent on older GPUs, where no matmul or convolution kernel ran (nothing for Tensor
    Cores to speed up), and when 16-bit compute is already there: also when XProf says
    otherwise but matmul and convolution kernels whose names say 16-bit run `LOW_16BIT_SHARE`
    of their time (XProf cannot map kernels launched from XLA's command buffers to their ops,
    and counts them as 32-bit: a bf16 JAX job on an H200 read 0 %).
    """
    gpu = summary.gpu
    if gpu is None or not gpu.active:
        return None
    device = gpu.active[0]
    cc = compute_capability(device.compute_capability)
    if cc is None or cc < TENSOR_CORE_MIN_CC:
        return None
    u = summary.utilisation
    units = Vendor(device.vendor).matrix_units
    eligible = sum(d.kernels.tensor_core_eligible_ms for d in gpu.active)
    on_tensor_cores = sum(d.kernels.tensor_core_ms for d in gpu.active)
    sixteen_bit_ms = sum(d.kernels.sixteen_bit_ms for d in gpu.active)
    if eligible <= 0 or sixteen_bit_ms / eligible >= LOW_16BIT_SHARE:
        return None
    if u.device_compute_16bit_pct is not None and (u.device_compute_32bit_pct or 0) > 0:
        if u.device_compute_16bit_pct / 100 >= LOW_16BIT_SHARE:  # XProf's figure is 0-100
            return None
        basis = f"{u.device_compute_16bit_pct:g}% of device compute is 16-bit (XProf)"
    elif eligible > 0:
        if on_tensor_cores / eligible >= LOW_TENSOR_CORE_SHARE:
            return None
        basis = (
            f"{on_tensor_cores / eligible:.0%} of matmul and convolution kernel time "
            f"runs on {units}"
        )
    else:
        return None
    kernel_share = max(d.kernel_share for d in gpu.active)
    warning = kernel_share >= PRECISION_WARNING_KERNEL_SHARE
    severity = Severity.WARNING if warning else Severity.INFO
    name = device.model or f"GPU (compute capability {device.compute_capability})"
    # What is at stake: the 32-bit matmul time of the GPU with the most, over its window.
    at_stake = max(
        (d.kernels.tensor_core_eligible_ms - d.kernels.sixteen_bit_ms) / d.window_ms
        for d in gpu.active
        if d.window_ms
    )
    return Finding(
        severity=severity,
        title=f"The {name} has {units} but computes in 32-bit: {basis}; 32-bit matmuls and "
        f"convolutions fill {at_stake:.0%} of its time",
        evidence=MixedPrecisionEvidence(
            gpu=device.model,
            compute_capability=device.compute_capability,
            device_compute_16bit_pct=u.device_compute_16bit_pct,
            device_compute_32bit_pct=u.device_compute_32bit_pct,
            xprof_statement=u.precision_statement,
            tensor_core_eligible_ms=round(eligible, 3),
            tensor_core_ms=round(on_tensor_cores, 3),
            sixteen_bit_kernel_ms=round(sixteen_bit_ms, 3),
            kernel_share=kernel_share,
        ).model_dump(),
        recommendation="Compute in 16-bit where it is safe: "
        '`tf.keras.mixed_precision.set_global_policy("mixed_float16")` before building the '
        "model (Keras scales the loss for you; keep the last layer's output in float32), and "
        "keep matmul and convolution dimensions multiples of 8."
        + (
            " The GPU computes only part of the time: the other findings come first."
            if severity is Severity.INFO
            else ""
        ),
        docs="https://www.tensorflow.org/guide/mixed_precision",
        impact_share=round(min(at_stake, 1.0), 4),
    )


@rule(
    Rule.TENSOR_CORES_UNUSED,
    silenced_by=(Rule.MIXED_PRECISION,),
    evidence=TensorCoresUnusedEvidence,
    impact=mixed_precision_saving,
    advice=TENSOR_CORES_UNUSED_ADVICE,
)
def tensor_cores_unused(summary: Summary) -> Finding | None:
    """At least `TENSOR_CORE_UNUSED_SHARE` of kernel time is in Tensor-Core-eligible ops
    whose kernels do not use them (XProf's kernel stats); silent where mixed_precision fires,
    which gives the same advice from the GPU's precision, and on AMD GPUs, where XProf reads
    Tensor Core use from NVIDIA's kernel names (mixed_precision reads ROCm's).
    """
    if summary.gpu is not None and any(d.vendor == "amd" for d in summary.gpu.devices):
        return None
    k = summary.kernels
    unused = share(k.eligible_unused_us, k.total_us)
    if unused < TENSOR_CORE_UNUSED_SHARE:
        return None
    names = [
        kern.op_name for kern in k.top if kern.tensor_core_eligible and not kern.uses_tensor_core
    ]
    return Finding(
        severity=Severity.WARNING,
        title=f"{unused:.0%} of kernel time could use Tensor Cores but does not",
        evidence=TensorCoresUnusedEvidence(
            eligible_unused_share=round(unused, 4), ops=names[:5]
        ).model_dump(),
        recommendation="Enable mixed precision (`keras.mixed_precision.set_global_policy("
        "'mixed_float16')`) and keep matmul/conv dimensions multiples of 8.",
        docs="https://www.tensorflow.org/guide/mixed_precision",
        # At stake is a share of step time: that kernel time over the steps' (kernel stats
        # span the capture's steps).
        impact_share=round(min(1.0, share(k.eligible_unused_us / 1000, _steps_ms(summary))), 4),
    )


def _steps_ms(summary: Summary) -> float:
    return (summary.step_time.avg_ms or 0.0) * summary.step_time.count
