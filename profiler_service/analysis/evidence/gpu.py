"""The GPUs' evidence, read from their own planes (rules/gpu.py): an empty trace, precision,
tiny kernels, several GPUs against each other."""

from __future__ import annotations

from pydantic import Field

from profiler_service.analysis.evidence.base import Evidence

__all__ = [
    "DeviceTraceMissingEvidence",
    "GpuImbalanceEvidence",
    "KernelLaunchBoundEvidence",
    "MixedPrecisionEvidence",
]


class DeviceTraceMissingEvidence(Evidence):
    """device_trace_missing: the GPUs the capture names, none with a kernel or a copy."""

    gpus: list[str] = Field(description="the GPUs the capture names (/device:GPU:0, ...)")
    models: list[str] = Field(description="their models, where the capture identifies them")
    step_count: int = Field(description="the steps the capture marked")


class MixedPrecisionEvidence(Evidence):
    """mixed_precision: a GPU with Tensor Cores computing in 32-bit, by XProf's figure or by
    the kernels' own names."""

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
    kernel_pct: float = Field(
        description="the largest share of the capture an active GPU ran kernels, in %"
    )


class KernelLaunchBoundEvidence(Evidence):
    """kernel_launch_bound: launching kernels takes the step, by XProf's figure (the first two
    fields) or by the GPU's own plane (the others)."""

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
    gpu_busy_pct: float | None = Field(
        None, description="from the GPU's plane: the share of the capture it was busy, in %"
    )
    idle_while_host_ops_pct: float | None = Field(
        None,
        description="from the GPU's plane: the share of the capture it idled while the host ran "
        "TF ops and launched kernels, in %",
    )


class GpuImbalanceEvidence(Evidence):
    """gpu_imbalance: each GPU's busy share, the ones that ran nothing, the slowest."""

    busy_pct: dict[str, float] = Field(
        description="each GPU's share of the capture busy with kernels or copies, in %"
    )
    unused: list[str] = Field(description="the GPUs that ran no kernel")
    spread_points: float = Field(
        description="the busiest active GPU's busy share less the least busy one's, in points"
    )
    slowest: str = Field(description="the busiest GPU, which every replica waits for")
