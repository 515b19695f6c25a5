"""The accelerator's evidence (rules/device.py): idle time, dominant ops, communication, copies,
Tensor Cores."""

from __future__ import annotations

from pydantic import Field

from profiler_service.analysis.evidence.base import Evidence

__all__ = [
    "CommunicationBoundEvidence",
    "DeviceIdleEvidence",
    "HostDeviceTransferEvidence",
    "OpDominatesEvidence",
    "TensorCoresUnusedEvidence",
]


class DeviceIdleEvidence(Evidence):
    """device_idle: how idle the accelerator was and, on a GPU, what the host did meanwhile."""

    device_idle_pct: float = Field(description="the share of the time the device idled")
    device_duty_cycle_pct: float | None = Field(None, description="XProf's device duty cycle")
    bottleneck: str | None = Field(None, description="the summary's bottleneck")
    idle_while_host_pct: dict[str, float] | None = Field(
        None,
        description="on a GPU: the share of the capture it idled while the host did each "
        "activity (input, transfer, tf_ops, python, tf_data, nothing)",
    )
    gpus: dict[str, float] | None = Field(
        None, description="on a GPU: each active GPU's idle share"
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


class TensorCoresUnusedEvidence(Evidence):
    """tensor_cores_unused: kernel time that could run on Tensor Cores and does not."""

    eligible_unused_share: float = Field(
        description="the share (0-1) of kernel time in Tensor-Core-eligible ops whose kernels "
        "do not use them (XProf's kernel stats)"
    )
    ops: list[str] = Field(description="up to five such ops, from XProf's top kernels")
