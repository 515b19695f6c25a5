"""The accelerator: idle time, dominant ops, communication, copies; each rule with
its evidence, what its fix saves and its advice for JAX."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from profiler_service.analysis.findings.advice import JAX_INPUT, JAX_STEP, JAX_SYNC, Advice
from profiler_service.analysis.findings.gpu import KERNEL_LAUNCH_BOUND_ADVICE
from profiler_service.analysis.findings.impact import device_wait, unmeasured
from profiler_service.analysis.findings.registry import rule, share
from profiler_service.analysis.models import (
    Finding,
    HostActivity,
    Impact,
    OpCategory,
    Severity,
    Summary,
)
from profiler_service.analysis.renamed_fields import percent
from profiler_service.analysis.rule import Evidence, Rule


class DeviceIdleEvidence(Evidence):
    """device_idle: how idle the accelerator was and, on a GPU, what the host did meanwhile."""

    old_percentages: ClassVar[dict[str, str]] = {
        "device_idle_pct": "device_idle_share",
        "device_duty_cycle_pct": "device_duty_cycle_share",
        "idle_while_host_pct": "idle_while_host_share",
        "gpus": "gpu_idle_share",
    }

    device_idle_share: float = Field(description="the share (0-1) of the time the device idled")
    device_duty_cycle_share: float | None = Field(
        None, description="XProf's device duty cycle, as a share (0-1)"
    )
    bottleneck: str | None = Field(None, description="the summary's bottleneck")
    idle_while_host_share: dict[str, float] | None = Field(
        None,
        description="on a GPU: the share (0-1) of the capture it idled while the host did each "
        "activity (input, transfer, tf_ops, python, tf_data, nothing)",
    )
    gpu_idle_share: dict[str, float] | None = Field(
        None, description="on a GPU: each active GPU's idle share (0-1)"
    )


class OpDominatesEvidence(Evidence):
    """op_dominates: the op that takes most of the op time on its side (device, else host)."""

    op: str = Field(description="the op's name")
    type: str = Field(description="the op's type (MatMul, Conv2D, ...)")
    self_time_share: float = Field(
        description="its share (0-1) of the op time on its side, its own time only"
    )
    self_time_ms: float = Field(description="its own time in the capture, in milliseconds")
    occurrences: int = Field(description="how many times it ran in the capture")


class CommunicationBoundEvidence(Evidence):
    """communication_bound: the step's time in collectives and device-to-device copies."""

    communication_share: float = Field(
        description="the share (0-1) of step time in collectives and device-to-device copies"
    )
    collectives_ms_avg: float = Field(description="the mean time a step spends in collectives")
    device_to_device_ms_avg: float = Field(
        description="the mean time a step spends copying between devices"
    )


class HostDeviceTransferEvidence(Evidence):
    """host_device_transfer: how much of the time copies between host and device take, from
    XProf's Memcpy ops (`transfer_share` only) or from the GPU's own plane (the other fields)."""

    transfer_share: float = Field(
        description="the share (0-1) of device op time in Memcpy ops (XProf), or of the capture "
        "the GPU copied to or from the host (the GPU's plane)"
    )
    gpu: str | None = Field(None, description="from the GPU's plane: the GPU that copied the most")
    host_to_device_ms_per_step: float | None = Field(
        None, description="from the GPU's plane: its copies to the device, per step"
    )
    device_to_host_ms_per_step: float | None = Field(
        None, description="from the GPU's plane: its copies to the host, per step"
    )
    gpu_idle_while_host_copies_share: float | None = Field(
        None,
        description="where the host's copying, not the GPU's, is long: the share (0-1) of the "
        "capture the GPU idled while the host copied to or from it",
    )


def device_idle_saving(finding: Finding, summary: Summary) -> Impact:
    """The device's idle time, less what the GPU idled while the host waited on tf.data (what
    its plane shows the host did meanwhile): that part is the input pipeline's, predicted per
    change by `input_bound`'s model; the rest as `device_wait`."""
    gpu = summary.gpu
    on_input = 0.0
    if gpu is not None and gpu.active:
        on_input = sum(gpu.idle_while(a) for a in (HostActivity.INPUT, HostActivity.TF_DATA))
    if on_input <= 0:
        return device_wait(finding, summary)
    rest = max(0.0, finding.impact_share - on_input)
    impact = device_wait(finding.model_copy(update={"impact_share": rest}), summary)
    impact.basis += (
        f" The {on_input:.0%} of the capture it idled while the host waited on tf.data is "
        "the input pipeline's (input_bound's prediction)."
    )
    return impact


OP_DOMINATES_ADVICE = Advice(
    jax="Optimise this op first: check its shapes and dtype (bfloat16), and "
    "whether XLA fuses it with its neighbours (one `jax.jit` over the whole step).",
)

COMMUNICATION_BOUND_ADVICE = Advice(
    jax="Grow the per-device batch so compute hides the collectives, shard "
    "with `jax.sharding.NamedSharding` so XLA overlaps them with compute, and check the "
    "collective library's (NCCL/RCCL) environment on the node.",
)

HOST_DEVICE_TRANSFER_ADVICE = Advice(
    jax="Keep arrays on the device between steps: `jax.device_put` the "
    "batch one step ahead (or shard it there), send uint8 images and cast on the device, and "
    "never pull device arrays back in the step (`np.asarray`, `float()`).",
)


DEVICE_IDLE_CRITICAL_SHARE = 0.50
DEVICE_IDLE_WARNING_SHARE = 0.20
OP_DOMINATES_SHARE = 0.5
COMMUNICATION_WARNING_SHARE = 0.15
TRANSFER_WARNING_SHARE = 0.15


def _has_device(summary: Summary) -> bool:
    return (summary.utilisation.hardware_type or "CPU_ONLY") != "CPU_ONLY"


def _gpu_idle_title(
    summary: Summary, idle: float, meanwhile: dict[HostActivity, float], words: dict
) -> str:
    """What the GPU idled and what the host did most meanwhile (shares), in `words`."""
    cause = max(meanwhile, key=lambda act: meanwhile[act])
    model = summary.gpu.active[0].model
    name = f"GPU ({model})" if model else "GPU"
    return (
        f"The {name} is idle {percent(idle):g}% of the capture; meanwhile the host was "
        f"{words[cause]} ({percent(meanwhile[cause]):g}% of the capture)"
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


# What the host did, as it reads for a JAX job.
JAX_IDLE_CAUSE = {
    **IDLE_CAUSE,
    HostActivity.TF_OPS: "running JAX's runtime and launching kernels",
}


JAX_IDLE_ADVICE = {
    HostActivity.INPUT: f"The device waits for input: {JAX_INPUT}.",
    HostActivity.TF_DATA: f"The input pipeline's threads are busy while the device waits: "
    f"{JAX_INPUT}.",
    HostActivity.TRANSFER: "The device waits while the host copies to or from it: "
    + HOST_DEVICE_TRANSFER_ADVICE.jax,
    HostActivity.TF_OPS: KERNEL_LAUNCH_BOUND_ADVICE.jax,
    HostActivity.PYTHON: f"Python runs between the device's kernels: {JAX_STEP}, and {JAX_SYNC}.",
    HostActivity.NOTHING: "Nothing traced on the host covers the gaps: look for Python between "
    f"steps and synchronous file reads; {JAX_SYNC}.",
}


def _jax_idle_advice(finding: Finding) -> str | None:
    """On a GPU, the advice for what the host did most while it idled; else the rule's."""
    meanwhile = DeviceIdleEvidence.model_validate(finding.evidence).idle_while_host_share or {}
    if not meanwhile:
        return None
    return JAX_IDLE_ADVICE[HostActivity(max(meanwhile, key=meanwhile.get))]


def _jax_idle_title(finding: Finding, summary: Summary) -> str:
    evidence = DeviceIdleEvidence.model_validate(finding.evidence)
    if not evidence.idle_while_host_share:
        return finding.title
    meanwhile = {HostActivity(act): s for act, s in evidence.idle_while_host_share.items()}
    return _gpu_idle_title(summary, evidence.device_idle_share, meanwhile, JAX_IDLE_CAUSE)


DEVICE_IDLE_ADVICE = Advice(jax=_jax_idle_advice, jax_title=_jax_idle_title)


@rule(
    Rule.DEVICE_IDLE,
    silenced_by=(Rule.DEVICE_TRACE_MISSING,),
    evidence=DeviceIdleEvidence,
    impact=device_idle_saving,
    advice=DEVICE_IDLE_ADVICE,
)
def device_idle(summary: Summary) -> Finding | None:
    """The accelerator is idle at least `DEVICE_IDLE_WARNING_SHARE` of the time (warning),
    `DEVICE_IDLE_CRITICAL_SHARE` (critical); silent on CPU-only captures and on GPU captures
    whose GPU trace is empty (`device_trace_missing`). On a GPU, XProf
    gives no idle share: it is read from the GPU's own plane (the GPUs that ran kernels, on
    average), with what the host did during the gaps, and advice for the largest part.
    """
    share = summary.device_idle_share
    gpu = summary.gpu
    if not _has_device(summary) or share is None:
        return None
    if share < DEVICE_IDLE_WARNING_SHARE:
        return None
    severity = Severity.CRITICAL if share >= DEVICE_IDLE_CRITICAL_SHARE else Severity.WARNING
    evidence = DeviceIdleEvidence(
        device_idle_share=share,
        device_duty_cycle_share=summary.utilisation.device_duty_cycle_share,
        bottleneck=summary.bottleneck,
    )
    name = summary.utilisation.device_type or "device"
    title = f"The {name} is idle {percent(share):g}% of the time"
    advice = IDLE_ADVICE[None]
    if gpu is not None and gpu.active and summary.utilisation.device_idle_share is None:
        meanwhile = {act: gpu.idle_while(act) for act in HostActivity}
        cause = max(meanwhile, key=lambda act: meanwhile[act])
        evidence.idle_while_host_share = {act.value: s for act, s in meanwhile.items()}
        evidence.gpu_idle_share = {d.device: d.idle_share for d in gpu.active}
        title = _gpu_idle_title(summary, share, meanwhile, IDLE_CAUSE)
        advice = IDLE_ADVICE[cause]
    return Finding(
        severity=severity,
        title=title,
        evidence=evidence.model_dump(),
        recommendation=advice,
        docs="https://www.tensorflow.org/guide/gpu_performance_analysis",
        impact_share=share,
    )


@rule(
    Rule.OP_DOMINATES,
    evidence=OpDominatesEvidence,
    impact=unmeasured,
    advice=OP_DOMINATES_ADVICE,
)
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


@rule(
    Rule.COMMUNICATION_BOUND,
    evidence=CommunicationBoundEvidence,
    impact=device_wait,
    advice=COMMUNICATION_BOUND_ADVICE,
)
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


@rule(
    Rule.HOST_DEVICE_TRANSFER,
    evidence=HostDeviceTransferEvidence,
    impact=device_wait,
    advice=HOST_DEVICE_TRANSFER_ADVICE,
)
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
        staging = gpu.idle_while(HostActivity.TRANSFER)
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
