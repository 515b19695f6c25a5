"""The GPUs, read from their own planes (analysis/readers/gpu_activity.py): how much of the capture
each one idled and what the host did meanwhile, precision, tiny kernels, copies, and several
GPUs against each other."""

from __future__ import annotations

from profiler_service.analysis.evidence import (
    DeviceTraceMissingEvidence,
    GpuImbalanceEvidence,
    KernelLaunchBoundEvidence,
    MixedPrecisionEvidence,
)
from profiler_service.analysis.gpu_models import Vendor, compute_capability
from profiler_service.analysis.models import Finding, HostActivity, Severity, Summary
from profiler_service.analysis.readers.gpu_activity import SHORT_KERNEL_US
from profiler_service.analysis.rules.registry import rule, share

DOCS = "https://www.tensorflow.org/guide/gpu_performance_analysis"
# Tensor Cores arrive with compute capability 7.0 (Volta); older GPUs gain little from 16-bit.
TENSOR_CORE_MIN_CC = (7, 0)
# XProf's own line (kLowPrecisionPercentThreshold): under this share of device compute in
# 16-bit, it says "Only x% of device computation is 16 bit".
LOW_16BIT_PCT = 10.0
# Without XProf's figure: under this share of Tensor-Core-eligible kernel time on Tensor Cores.
LOW_TENSOR_CORE_SHARE = 0.10
# Mixed precision is worth a warning once the GPU computes for at least this share of the
# capture; below it the GPU mostly waits, and the advice is info.
PRECISION_WARNING_KERNEL_PCT = 50.0
# XProf's threshold for kernel launch time (share of step time).
KERNEL_LAUNCH_HIGH_SHARE = 0.15
# Launch-bound: most kernels shorter than gpu_activity.SHORT_KERNEL_US, at least this many per
# step, and a GPU busy less than this share of the capture.
TINY_KERNEL_SHARE = 0.5
TINY_KERNELS_PER_STEP = 50
LAUNCH_BOUND_MAX_BUSY_PCT = 50.0
# Several GPUs: busy shares this many points apart, or a GPU that ran nothing.
IMBALANCE_WARNING_POINTS = 10.0


def trace_missing(summary: Summary) -> bool:
    """The capture has GPU planes but not one kernel or copy on any of them: the GPU tracer
    recorded nothing, which says nothing about whether the GPUs worked."""
    gpu = summary.gpu
    return gpu is not None and bool(gpu.devices) and not any(d.busy_pct > 0 for d in gpu.devices)


@rule("device_trace_missing", evidence=DeviceTraceMissingEvidence)
def device_trace_missing(summary: Summary) -> Finding | None:
    """The capture names GPUs but holds no kernel and no copy on any of them. The GPU tracer
    (CUPTI) recorded nothing: it found no CUPTI library, was refused (profiling restricted to
    admin users, a container without the capability), runs on native Windows, or the capture
    asked for no device trace. The device rules stay silent on such a capture: an empty trace
    is not an idle GPU."""
    if not trace_missing(summary):
        return None
    gpu = summary.gpu
    assert gpu is not None
    models = sorted({d.model for d in gpu.devices if d.model})
    named = f" ({', '.join(models)})" if models else ""
    return Finding(
        severity=Severity.WARNING,
        title=f"The capture holds no GPU activity: the GPU tracer recorded no kernel and no copy "
        f"on the {len(gpu.devices)} GPU{'s' if len(gpu.devices) > 1 else ''}{named} it names",
        evidence=DeviceTraceMissingEvidence(
            gpus=[d.device for d in gpu.devices],
            models=models,
            step_count=summary.step_time.count,
        ).model_dump(),
        recommendation="Nothing here says whether the GPUs worked; fix the trace and capture "
        "again. The job's log names the cause at the capture's start: (1) `Could not load "
        "dynamic library 'libcupti.so...'`: put CUDA's CUPTI on the library path "
        "(`LD_LIBRARY_PATH=/usr/local/cuda/extras/CUPTI/lib64`, or the `nvidia-cuda-cupti` "
        "wheel that `pip install tensorflow[and-cuda]` brings); (2) `CUPTI_ERROR_INSUFFICIENT_"
        "PRIVILEGES`: the driver restricts profiling to admin users: set "
        '`options nvidia "NVreg_RestrictProfilingToAdminUsers=0"` on the node, or give the '
        "container the `SYS_ADMIN` capability (`securityContext.capabilities.add`); (3) native "
        "Windows: the GPU tracer records nothing there; profile under WSL2 or Linux; (4) the "
        "capture asked for no device trace: capture with `device_tracer_level=1` (the "
        "default).",
        docs="https://www.tensorflow.org/guide/profiler#resolve_privilege_issues",
    )


@rule("mixed_precision", evidence=MixedPrecisionEvidence)
def mixed_precision(summary: Summary) -> Finding | None:
    """A GPU with Tensor Cores (compute capability 7.0 and up) computes in 32-bit: under
    `LOW_16BIT_PCT` % of device compute in 16-bit (XProf's figure), or, where XProf gives
    none, under `LOW_TENSOR_CORE_SHARE` of matmul/convolution kernel time on Tensor Cores.
    Warning once kernels run `PRECISION_WARNING_KERNEL_PCT` % of the capture, else info.
    Silent on older GPUs, where no matmul or convolution kernel ran (nothing for Tensor
    Cores to speed up), and when 16-bit compute is already there: also when XProf says
    otherwise but matmul and convolution kernels whose names say 16-bit run `LOW_16BIT_PCT` %
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
    if eligible <= 0 or sixteen_bit_ms / eligible * 100 >= LOW_16BIT_PCT:
        return None
    if u.device_compute_16bit_pct is not None and (u.device_compute_32bit_pct or 0) > 0:
        if u.device_compute_16bit_pct >= LOW_16BIT_PCT:
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
    kernel_pct = max(d.kernel_pct for d in gpu.active)
    severity = Severity.WARNING if kernel_pct >= PRECISION_WARNING_KERNEL_PCT else Severity.INFO
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
            kernel_pct=kernel_pct,
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


@rule("kernel_launch_bound", evidence=KernelLaunchBoundEvidence)
def kernel_launch_bound(summary: Summary) -> Finding | None:
    """Kernel launch takes at least `KERNEL_LAUNCH_HIGH_SHARE` of the step (XProf's figure),
    or, on the GPU's own plane, at least `TINY_KERNEL_SHARE` of kernels are tiny, at least
    `TINY_KERNELS_PER_STEP` of them per step, and the GPU is busy under
    `LAUNCH_BOUND_MAX_BUSY_PCT` % of the capture: it waits for the host to launch the next one.
    """
    st = summary.step_time
    launch = share(st.breakdown_avg.kernel_launch_ms, st.avg_ms)
    evidence = KernelLaunchBoundEvidence(
        kernel_launch_share=round(launch, 4),
        kernel_launch_ms_avg=st.breakdown_avg.kernel_launch_ms,
    )
    title = f"{launch:.0%} of step time is spent launching kernels"
    impact = launch
    gpu = summary.gpu
    if launch < KERNEL_LAUNCH_HIGH_SHARE:
        if gpu is None or not gpu.active:
            return None
        busiest = max(gpu.active, key=lambda d: d.busy_pct)
        kernels = busiest.kernels
        per_step = kernels.count / max(st.count, 1)
        if (
            kernels.short_share < TINY_KERNEL_SHARE
            or per_step < TINY_KERNELS_PER_STEP
            or busiest.busy_pct >= LAUNCH_BOUND_MAX_BUSY_PCT
        ):
            return None
        evidence = KernelLaunchBoundEvidence(
            gpu=busiest.device,
            kernels_per_step=round(per_step, 1),
            kernel_median_us=kernels.median_us,
            short_kernel_share=kernels.short_share,
            gpu_busy_pct=busiest.busy_pct,
            idle_while_host_ops_pct=busiest.idle_while_host_pct.get(HostActivity.TF_OPS.value, 0.0),
        )
        title = (
            f"Many tiny kernels: {per_step:.0f} per step, {kernels.short_share:.0%} of them "
            f"under {SHORT_KERNEL_US:g} µs (median {kernels.median_us:g} µs); the GPU is busy "
            f"{busiest.busy_pct:g}% of the time"
        )
        impact = (100 - busiest.busy_pct) / 100  # the GPU's idle time: what is at stake
    return Finding(
        severity=Severity.WARNING,
        title=title,
        evidence=evidence.model_dump(exclude_unset=True),  # the fields of its reading only
        recommendation="Each kernel costs a launch on the host that takes longer than the "
        "kernel: fuse them with XLA (`@tf.function(jit_compile=True)` or "
        "`model.compile(jit_compile=True)`), give each step more work (a larger batch), and "
        "run several steps per call (`steps_per_execution`).",
        docs=DOCS,
        impact_share=round(impact, 4),
    )


@rule("gpu_imbalance", silenced_by=("device_trace_missing",), evidence=GpuImbalanceEvidence)
def gpu_imbalance(summary: Summary) -> Finding | None:
    """Several GPUs: one or more ran no kernel, or their busy shares are at least
    `IMBALANCE_WARNING_POINTS` points apart (the busiest is the slowest: in a synchronous job
    every replica waits for it). A job that ran on one GPU of several it can see is told so at
    info level: it may never have meant to use the others, which its step time does not pay
    for but its GPU request does."""
    gpu = summary.gpu
    if gpu is None or len(gpu.devices) < 2 or not gpu.active:
        return None
    active = gpu.active
    unused = [d.device for d in gpu.devices if not d.kernels.count]
    busiest = max(active, key=lambda d: d.busy_pct)
    least = min(active, key=lambda d: d.busy_pct)
    spread = busiest.busy_pct - least.busy_pct
    if not unused and spread < IMBALANCE_WARNING_POINTS:
        return None
    # Step time at stake: none for GPUs that ran nothing (they cost held GPU-hours: impact.py);
    # for uneven ones, what the busiest makes the others wait.
    mean_busy = sum(d.busy_pct for d in active) / len(active)
    severity = Severity.WARNING
    impact = 0.0 if unused else 1 - mean_busy / busiest.busy_pct
    if len(active) == 1:
        severity = Severity.INFO
        title = (
            f"The job used 1 of the {len(gpu.devices)} GPUs it can see ({active[0].device}); "
            f"{len(unused)} ran no kernel"
        )
        advice = (
            "If the job is meant for one GPU, let it see one and hold one: "
            f"`CUDA_VISIBLE_DEVICES=0` and a request of `nvidia.com/gpu: 1`, so the other "
            f"{len(unused)} serve other jobs. If it is meant to use them all, distribute it: "
            "`tf.distribute.MirroredStrategy()` on one host."
        )
    elif unused:
        title = (
            f"{len(unused)} of {len(gpu.devices)} GPUs ran no kernel during the capture; "
            f"{len(active)} did the work"
        )
        advice = (
            "Check that the job places work on every GPU it holds: a distribution strategy "
            "(`tf.distribute.MirroredStrategy()`) over all of them, or limit the pod to the "
            "GPUs it uses (`CUDA_VISIBLE_DEVICES`, the `nvidia.com/gpu` request)."
        )
    else:
        title = (
            f"The GPUs are unevenly busy: {busiest.device} {busiest.busy_pct:g}% against "
            f"{least.device} {least.busy_pct:g}%; {busiest.device} is the slowest"
        )
        advice = (
            f"Every replica waits for {busiest.device} at each all-reduce: give the replicas "
            "equal shards and batch sizes, and check that nothing else runs on it."
        )
    return Finding(
        severity=severity,
        title=title,
        evidence=GpuImbalanceEvidence(
            busy_pct={d.device: d.busy_pct for d in gpu.devices},
            unused=unused,
            spread_points=round(spread, 1),
            slowest=busiest.device,
        ).model_dump(),
        recommendation=advice,
        docs="https://www.tensorflow.org/guide/distributed_training",
        impact_share=round(impact, 4),
    )
