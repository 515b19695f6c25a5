"""The accelerator: idle time, dominant ops, communication, Tensor Cores."""

from __future__ import annotations

from profiler_service.analysis.evidence import (
    CommunicationBoundEvidence,
    DeviceIdleEvidence,
    HostDeviceTransferEvidence,
    OpDominatesEvidence,
    TensorCoresUnusedEvidence,
)
from profiler_service.analysis.models import (
    Finding,
    HostActivity,
    OpCategory,
    Severity,
    Summary,
)
from profiler_service.analysis.rules.registry import rule, share

DEVICE_IDLE_CRITICAL_PCT = 50.0
DEVICE_IDLE_WARNING_PCT = 20.0
OP_DOMINATES_SHARE = 0.5
COMMUNICATION_WARNING_SHARE = 0.15
TRANSFER_WARNING_SHARE = 0.15
TENSOR_CORE_UNUSED_SHARE = 0.10


def _has_device(summary: Summary) -> bool:
    return (summary.utilisation.hardware_type or "CPU_ONLY") != "CPU_ONLY"


@rule("device_idle", silenced_by=("device_trace_missing",), evidence=DeviceIdleEvidence)
def device_idle(summary: Summary) -> Finding | None:
    """The accelerator is idle at least `DEVICE_IDLE_WARNING_PCT` % of the time (warning),
    `DEVICE_IDLE_CRITICAL_PCT` % (critical); silent on CPU-only captures and on GPU captures
    whose GPU trace is empty (`device_trace_missing`). On a GPU, XProf
    gives no idle share: it is read from the GPU's own plane (the GPUs that ran kernels, on
    average), with what the host did during the gaps, and advice for the largest part.
    """
    idle = summary.device_idle_pct
    gpu = summary.gpu
    if not _has_device(summary) or idle is None or idle < DEVICE_IDLE_WARNING_PCT:
        return None
    severity = Severity.CRITICAL if idle >= DEVICE_IDLE_CRITICAL_PCT else Severity.WARNING
    evidence = DeviceIdleEvidence(
        device_idle_pct=idle,
        device_duty_cycle_pct=summary.utilisation.device_duty_cycle_pct,
        bottleneck=summary.bottleneck,
    )
    name = summary.utilisation.device_type or "device"
    title = f"The {name} is idle {idle:g}% of the time"
    advice = IDLE_ADVICE[None]
    if gpu is not None and gpu.active and summary.utilisation.device_idle_pct is None:
        meanwhile = {act: gpu.idle_while(act) for act in HostActivity}
        cause = max(meanwhile, key=lambda act: meanwhile[act])
        evidence.idle_while_host_pct = {act.value: pct for act, pct in meanwhile.items()}
        evidence.gpus = {d.device: d.idle_pct for d in gpu.active}
        model = gpu.active[0].model
        name = f"GPU ({model})" if model else "GPU"
        title = (
            f"The {name} is idle {idle:g}% of the capture; meanwhile the host was "
            f"{IDLE_CAUSE[cause]} ({meanwhile[cause]:g}% of the capture)"
        )
        advice = IDLE_ADVICE[cause]
    return Finding(
        severity=severity,
        title=title,
        evidence=evidence.model_dump(),
        recommendation=advice,
        docs="https://www.tensorflow.org/guide/gpu_performance_analysis",
        impact_share=idle / 100,
    )


IDLE_CAUSE = {
    HostActivity.INPUT: "waiting for the next batch from tf.data",
    HostActivity.TRANSFER: "copying data to or from the GPU",
    HostActivity.TF_OPS: "running TF ops and launching kernels",
    HostActivity.PYTHON: "running Python or dispatching ops eagerly",
    HostActivity.TF_DATA: "preparing later batches in tf.data",
    HostActivity.NOTHING: "running nothing the profiler traced (Python between steps, I/O, "
    "or waiting on other workers)",
}
IDLE_ADVICE = {
    None: "The host does not feed the device fast enough: see the input and host findings; "
    "overlap input with `prefetch`, and keep Python out of the step.",
    HostActivity.INPUT: "The GPU waits for input: see the input_bound finding; parallelise "
    "the pipeline's map, end it with `.prefetch(tf.data.AUTOTUNE)`, and keep Python "
    "decoding out of it.",
    HostActivity.TRANSFER: "The GPU waits while the host copies data to or from it: see "
    "host_device_transfer; keep tensors on the GPU between steps, prefetch the next batch to "
    "the device while this one computes, and read results back (`.numpy()`, `float(loss)`) "
    "every N steps rather than every step.",
    HostActivity.TF_OPS: "The host is the bottleneck while it launches kernels and runs ops: "
    "see kernel_launch_bound; fuse small ops with XLA (`jit_compile=True`), grow the batch, "
    "and keep ops that have no GPU kernel out of the step.",
    HostActivity.PYTHON: "Python runs between the GPU's kernels: wrap the step in "
    "`@tf.function` and move per-step Python (logging, metrics, `.numpy()`) out of it.",
    HostActivity.TF_DATA: "tf.data's threads are busy while the GPU waits: see the input "
    "findings; parallelise and prefetch the pipeline.",
    HostActivity.NOTHING: "Nothing traced on the host covers the gaps: look for Python between "
    "steps (callbacks, logging, `.numpy()`, summaries written every step) and synchronous "
    "file reads; capture with `python_tracer_level=1` to see the Python.",
}


@rule("op_dominates", evidence=OpDominatesEvidence)
def op_dominates(summary: Summary) -> Finding | None:
    """One op (not an input op) takes at least `OP_DOMINATES_SHARE` of op time on its side
    (the device, else the host).
    """
    side = "Device" if _has_device(summary) else "Host"
    ops = [
        op
        for op in summary.top_ops
        if op.host_or_device == side and op.category is not OpCategory.INPUT
    ]
    if not ops or ops[0].self_time_share < OP_DOMINATES_SHARE:
        return None
    top = ops[0]
    return Finding(
        severity=Severity.INFO,
        title=f"One op, {top.name} ({top.type}), takes {top.self_time_share:.0%} of "
        f"{side.lower()} op time",
        evidence=OpDominatesEvidence(
            op=top.name,
            type=top.type,
            self_time_share=round(top.self_time_share, 4),
            self_time_ms=round(top.self_time_ms, 3),
            occurrences=top.occurrences,
        ).model_dump(),
        recommendation="Optimise this op first: check its shapes and dtype (mixed precision), "
        "whether XLA fuses it (`jit_compile=True`), and whether it runs more "
        "often than the model needs.",
        impact_share=top.self_time_share,
    )


@rule("communication_bound", evidence=CommunicationBoundEvidence)
def communication_bound(summary: Summary) -> Finding | None:
    """Collectives and device-to-device copies take at least `COMMUNICATION_WARNING_SHARE`
    of the step.
    """
    st = summary.step_time
    part = st.breakdown_avg.collectives_ms + st.breakdown_avg.device_to_device_ms
    comm = share(part, st.avg_ms)
    if comm < COMMUNICATION_WARNING_SHARE:
        return None
    return Finding(
        severity=Severity.WARNING,
        title=f"{comm:.0%} of step time is collectives and device-to-device copies",
        evidence=CommunicationBoundEvidence(
            communication_share=round(comm, 4),
            collectives_ms_avg=st.breakdown_avg.collectives_ms,
            device_to_device_ms_avg=st.breakdown_avg.device_to_device_ms,
        ).model_dump(),
        recommendation="Grow the per-replica batch so compute hides communication, pack "
        "gradients (`CommunicationOptions(bytes_per_pack=...)`), or use NCCL "
        "for all-reduce.",
        docs="https://www.tensorflow.org/guide/distributed_training",
        impact_share=comm,
    )


@rule("host_device_transfer", evidence=HostDeviceTransferEvidence)
def host_device_transfer(summary: Summary) -> Finding | None:
    """Copies between host and device take at least `TRANSFER_WARNING_SHARE` of device time
    (Memcpy ops in XProf's op stats), or, on a GPU's own plane, of the capture; or the GPU
    idles that share of the capture while the host copies to or from it (staging a NumPy
    array, reading a result back): the GPU's copy itself is then short, the host's long."""
    if not _has_device(summary):
        return None
    transfer = sum(
        op.self_time_share
        for op in summary.top_ops
        if op.host_or_device == "Device" and op.type.startswith("Memcpy")
    )
    evidence = HostDeviceTransferEvidence(transfer_share=round(transfer, 4))
    title = f"{transfer:.0%} of device time copies data between host and device"
    gpu = summary.gpu
    if transfer < TRANSFER_WARNING_SHARE and gpu is not None and gpu.active:
        worst = max(
            gpu.active, key=lambda d: d.copies.host_to_device_ms + d.copies.device_to_host_ms
        )
        copy_ms = worst.copies.host_to_device_ms + worst.copies.device_to_host_ms
        transfer = copy_ms / worst.window_ms if worst.window_ms else 0.0
        steps = max(summary.step_time.count, 1)
        evidence = HostDeviceTransferEvidence(
            transfer_share=round(transfer, 4),
            gpu=worst.device,
            host_to_device_ms_per_step=round(worst.copies.host_to_device_ms / steps, 3),
            device_to_host_ms_per_step=round(worst.copies.device_to_host_ms / steps, 3),
        )
        title = f"{transfer:.0%} of the capture copies data between host and {worst.device}"
        staging = gpu.idle_while(HostActivity.TRANSFER) / 100
        if transfer < TRANSFER_WARNING_SHARE <= staging:
            evidence.gpu_idle_while_host_copies_share = round(staging, 4)
            title = (
                f"The GPU idles {staging:.0%} of the capture while the host copies data to or "
                f"from it (the GPU's own copies take {transfer:.0%})"
            )
            transfer = staging
    if transfer < TRANSFER_WARNING_SHARE:
        return None
    return Finding(
        severity=Severity.WARNING,
        title=title,
        evidence=evidence.model_dump(exclude_unset=True),  # the fields of its reading only
        recommendation="Keep tensors on the device between steps; prefetch to the device "
        "(`tf.data.experimental.prefetch_to_device`) so the next batch is copied while this "
        "one computes; send uint8 images and cast on the device; avoid `.numpy()` in the "
        "step.",
        docs="https://www.tensorflow.org/guide/gpu_performance_analysis",
        impact_share=transfer,
    )


@rule(
    "tensor_cores_unused",
    silenced_by=("mixed_precision",),
    evidence=TensorCoresUnusedEvidence,
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
