"""The GPUs, read from their own planes (analysis/readers/gpu_activity.py): an empty trace,
tiny kernels, and several GPUs against each other; each rule with its evidence, what
its fix saves and its advice for JAX and ROCm."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from profiler_service.analysis.findings.advice import JAX_STEP, Advice
from profiler_service.analysis.findings.impact import device_wait, nothing, removed, unmeasured
from profiler_service.analysis.findings.registry import rule, share
from profiler_service.analysis.models import (
    Finding,
    HostActivity,
    Impact,
    Severity,
    Summary,
)
from profiler_service.analysis.readers.gpu_activity import SHORT_KERNEL_US
from profiler_service.analysis.renamed_fields import percent
from profiler_service.analysis.rule import Evidence, Rule


class DeviceTraceMissingEvidence(Evidence):
    """device_trace_missing: the GPUs the capture names, none with a kernel or a copy."""

    gpus: list[str] = Field(description="the GPUs the capture names (/device:GPU:0, ...)")
    models: list[str] = Field(description="their models, where the capture identifies them")
    step_count: int = Field(description="the steps the capture marked")


class KernelLaunchBoundEvidence(Evidence):
    """kernel_launch_bound: launching kernels takes the step, by XProf's figure (the first two
    fields) or by the GPU's own plane (the others)."""

    old_percentages: ClassVar[dict[str, str]] = {
        "gpu_busy_pct": "gpu_busy_share",
        "idle_while_host_ops_pct": "idle_while_host_ops_share",
    }

    kernel_launch_share: float | None = Field(
        None, description="from XProf: the share (0-1) of step time spent launching kernels"
    )
    kernel_launch_ms_avg: float | None = Field(
        None, description="from XProf: the mean time a step spends launching kernels"
    )
    gpu: str | None = Field(None, description="from the GPU's plane: the busiest GPU")
    kernels_per_step: float | None = Field(
        None, description="from the GPU's plane: its kernels per step"
    )
    kernel_median_us: float | None = Field(
        None, description="from the GPU's plane: its median kernel's length, in microseconds"
    )
    short_kernel_share: float | None = Field(
        None, description="from the GPU's plane: the share (0-1) of its kernels that are tiny"
    )
    gpu_busy_share: float | None = Field(
        None, description="from the GPU's plane: the share (0-1) of the capture it was busy"
    )
    idle_while_host_ops_share: float | None = Field(
        None,
        description="from the GPU's plane: the share (0-1) of the capture it idled while the "
        "host ran TF ops and launched kernels",
    )


class GpuImbalanceEvidence(Evidence):
    """gpu_imbalance: each GPU's busy share, the ones that ran nothing, the slowest."""

    old_percentages: ClassVar[dict[str, str]] = {"busy_pct": "busy_share"}

    busy_share: dict[str, float] = Field(
        description="each GPU's share (0-1) of the capture busy with kernels or copies"
    )
    unused: list[str] = Field(description="the GPUs that ran no kernel")
    spread_points: float = Field(
        description="the busiest active GPU's busy share less the least busy one's, in points"
    )
    slowest: str = Field(description="the busiest GPU, which every replica waits for")


def gpu_imbalance_saving(finding: Finding, summary: Summary) -> Impact:
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


DEVICE_TRACE_MISSING_ADVICE = Advice(
    jax=(
        "Nothing here says whether the GPUs worked; fix the trace and capture again. The job's log "
        "names the cause at the capture's start: CUPTI not found (install the CUDA wheels JAX "
        'brings, `pip install -U "jax[cuda12]"`, or put CUDA\'s `extras/CUPTI/lib64` on '
        "`LD_LIBRARY_PATH`); `CUPTI_ERROR_INSUFFICIENT_PRIVILEGES` (set "
        '`options nvidia "NVreg_RestrictProfilingToAdminUsers=0"` on the node, or give the '
        "container `SYS_ADMIN`); or a trace started before the GPU backend was initialised."
    ),
    # On AMD GPUs the tracer is ROCm's, not CUPTI.
    rocm=(
        "Nothing here says whether the GPUs worked; fix the trace and capture again. ROCm's tracer "
        "(roctracer / rocprofiler-sdk, which XLA's ROCm profiler loads) recorded nothing: check "
        "that the ROCm profiler libraries are in the image (`/opt/rocm/lib/libroctracer64.so` or "
        "`librocprofiler-sdk.so`), that the container reaches `/dev/kfd` and `/dev/dri` (the "
        "`video` and `render` groups), and that the capture asked for a device trace "
        "(`device_tracer_level=1`)."
    ),
)

KERNEL_LAUNCH_BOUND_ADVICE = Advice(
    jax=f"Each kernel costs a launch on the host: {JAX_STEP}, run several "
    "steps per call with `jax.lax.scan` over a stack of batches, and give each step more work "
    "(a larger batch).",
    keras3_jax="Each kernel costs a launch on the host: keep `jit_compile=True` "
    "(the JAX backend's default), run several steps per call (`model.compile(..., "
    "steps_per_execution=N)`), and give each step more work (a larger batch).",
)

GPU_IMBALANCE_ADVICE = Advice(
    jax="Place work on every device the job holds: shard the batch over a "
    "`jax.sharding.Mesh` of all `jax.devices()` (`NamedSharding`), or limit the job to the "
    "devices it uses (`CUDA_VISIBLE_DEVICES` and the `nvidia.com/gpu` request).",
)


DOCS = "https://www.tensorflow.org/guide/gpu_performance_analysis"
# XProf's threshold for kernel launch time (share of step time).
KERNEL_LAUNCH_HIGH_SHARE = 0.15
# Launch-bound: most kernels shorter than gpu_activity.SHORT_KERNEL_US, at least this many per
# step, and a GPU busy less than this share of the capture.
TINY_KERNEL_SHARE = 0.5
TINY_KERNELS_PER_STEP = 50
LAUNCH_BOUND_MAX_BUSY_SHARE = 0.50
# Several GPUs: busy shares this many points apart, or a GPU that ran nothing.
IMBALANCE_WARNING_POINTS = 10.0


def trace_missing(summary: Summary) -> bool:
    """The capture has GPU planes but not one kernel or copy on any of them: the GPU tracer
    recorded nothing, which says nothing about whether the GPUs worked."""
    gpu = summary.gpu
    return gpu is not None and bool(gpu.devices) and not any(d.busy_share > 0 for d in gpu.devices)


@rule(
    Rule.DEVICE_TRACE_MISSING,
    evidence=DeviceTraceMissingEvidence,
    impact=unmeasured,
    advice=DEVICE_TRACE_MISSING_ADVICE,
)
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


@rule(
    Rule.KERNEL_LAUNCH_BOUND,
    evidence=KernelLaunchBoundEvidence,
    impact=device_wait,
    advice=KERNEL_LAUNCH_BOUND_ADVICE,
)
def kernel_launch_bound(summary: Summary) -> Finding | None:
    """Kernel launch takes at least `KERNEL_LAUNCH_HIGH_SHARE` of the step (XProf's figure),
    or, on the GPU's own plane, at least `TINY_KERNEL_SHARE` of kernels are tiny, at least
    `TINY_KERNELS_PER_STEP` of them per step, and the GPU is busy under
    `LAUNCH_BOUND_MAX_BUSY_SHARE` of the capture: it waits for the host to launch the next one.
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
        busiest = max(gpu.active, key=lambda d: d.busy_share)
        busy = percent(busiest.busy_share)
        kernels = busiest.kernels
        per_step = kernels.count / max(st.count, 1)
        if (
            kernels.short_share < TINY_KERNEL_SHARE
            or per_step < TINY_KERNELS_PER_STEP
            or busiest.busy_share >= LAUNCH_BOUND_MAX_BUSY_SHARE
        ):
            return None
        evidence = KernelLaunchBoundEvidence(
            gpu=busiest.device,
            kernels_per_step=round(per_step, 1),
            kernel_median_us=kernels.median_us,
            short_kernel_share=kernels.short_share,
            gpu_busy_share=busiest.busy_share,
            idle_while_host_ops_share=busiest.idle_while_host_share.get(
                HostActivity.TF_OPS.value, 0.0
            ),
        )
        title = (
            f"Many tiny kernels: {per_step:.0f} per step, {kernels.short_share:.0%} of them "
            f"under {SHORT_KERNEL_US:g} µs (median {kernels.median_us:g} µs); the GPU is busy "
            f"{busy:g}% of the time"
        )
        impact = 1 - busiest.busy_share  # the GPU's idle time: what is at stake
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


@rule(
    Rule.GPU_IMBALANCE,
    silenced_by=(Rule.DEVICE_TRACE_MISSING,),
    evidence=GpuImbalanceEvidence,
    impact=gpu_imbalance_saving,
    advice=GPU_IMBALANCE_ADVICE,
)
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
    busiest = max(active, key=lambda d: d.busy_share)
    least = min(active, key=lambda d: d.busy_share)
    spread = percent(busiest.busy_share) - percent(least.busy_share)
    if not unused and spread < IMBALANCE_WARNING_POINTS:
        return None
    # Step time at stake: none for GPUs that ran nothing (they cost held GPU-hours: impact.py);
    # for uneven ones, what the busiest makes the others wait.
    mean_busy = sum(d.busy_share for d in active) / len(active)
    severity = Severity.WARNING
    impact = 0.0 if unused else 1 - mean_busy / busiest.busy_share
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
            f"The GPUs are unevenly busy: {busiest.device} {percent(busiest.busy_share):g}% "
            f"against {least.device} {percent(least.busy_share):g}%; {busiest.device} is the "
            "slowest"
        )
        advice = (
            f"Every replica waits for {busiest.device} at each all-reduce: give the replicas "
            "equal shards and batch sizes, and check that nothing else runs on it."
        )
    return Finding(
        severity=severity,
        title=title,
        evidence=GpuImbalanceEvidence(
            busy_share={d.device: d.busy_share for d in gpu.devices},
            unused=unused,
            spread_points=round(spread, 1),
            slowest=busiest.device,
        ).model_dump(),
        recommendation=advice,
        docs="https://www.tensorflow.org/guide/distributed_training",
        impact_share=round(impact, 4),
    )
