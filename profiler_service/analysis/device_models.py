"""The summary's devices: the kernels XProf lists, and what each GPU did and idled behind
(gpu_activity.py, host_activity.py read them). Part of `models.Summary`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, Field

from profiler_service.analysis.renamed_fields import ReadsOldPercentages


class Kernel(BaseModel):
    name: str
    op_name: str
    occurrences: int
    total_us: float
    tensor_core_eligible: bool
    uses_tensor_core: bool


class Kernels(BaseModel):
    total_us: float = 0.0
    top: list[Kernel] = Field(default_factory=list)
    # Time in kernels of ops that could use Tensor Cores but whose kernels did not.
    eligible_unused_us: float = 0.0


class HostActivity(StrEnum):
    """What the host was doing, read from its traced events (gpu_activity.py)."""

    INPUT = "input"  # waiting on tf.data: the step's get-next, what it runs, the input's copy
    TRANSFER = "transfer"  # copying to or from the GPU itself: staging buffers, .numpy()
    TF_OPS = "tf_ops"  # TF ops run on the host, kernel launches, copies, the TF runtime
    PYTHON = "python"  # Python (when traced) and eager op-by-op dispatch
    TF_DATA = "tf_data"  # tf.data's own threads preparing later elements (in the background)
    NOTHING = "nothing"  # no traced host work: untraced Python, I/O, or waiting

    @property
    def label(self) -> str:
        """How the report and the command line name it."""
        return _HOST_ACTIVITY_LABELS[self]


_HOST_ACTIVITY_LABELS = {
    HostActivity.INPUT: "waiting on tf.data",
    HostActivity.TRANSFER: "copies to and from the GPU",
    HostActivity.TF_OPS: "TF ops and launches",
    HostActivity.PYTHON: "Python/eager",
    HostActivity.TF_DATA: "tf.data in the background",
    HostActivity.NOTHING: "nothing traced",
}


class GpuCopies(BaseModel):
    host_to_device_ms: float = 0.0
    device_to_host_ms: float = 0.0
    device_to_device_ms: float = 0.0  # within the GPU and peer to peer


class GpuKernels(BaseModel):
    count: int = 0
    total_ms: float = 0.0
    median_us: float | None = None
    short_share: float = 0.0  # of kernels, under gpu_activity.SHORT_KERNEL_US
    # Time in kernels of ops that can run on Tensor Cores (matmuls, convolutions), and in
    # kernels whose names say they do (read from the device plane: XProf's kernel stats of
    # older captures carry no op names).
    tensor_core_eligible_ms: float = 0.0
    tensor_core_ms: float = 0.0
    # Of those eligible kernels, the ones whose names say they compute in 16 bits (fp16,
    # bf16): where XProf cannot map a kernel to its op (XLA's command buffers, CUDA graphs),
    # its precision figure misses them.
    sixteen_bit_ms: float = 0.0


class GpuDevice(ReadsOldPercentages):
    """One GPU over the capture, from its own plane: what ran on it and when."""

    old_percentages: ClassVar[dict[str, str]] = {
        "busy_pct": "busy_share",
        "kernel_pct": "kernel_share",
        "idle_pct": "idle_share",
        "busy_timeline_pct": "busy_timeline_share",
        "idle_while_host_pct": "idle_while_host_share",
    }

    device: str  # /device:GPU:0, prefixed with the host when the capture has several
    host: str = ""
    vendor: str = "nvidia"  # nvidia, amd (the plane's device_vendor): gpu_models.Vendor
    model: str | None = None  # where the figures below identify one
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    memory_bandwidth_gbps: float | None = None  # GB/s
    clock_mhz: float | None = None
    window_ms: float = 0.0  # the span of the capture's events on its host
    busy_share: float = 0.0  # kernels or copies running, of the window
    kernel_share: float = 0.0
    idle_share: float = 1.0
    copies: GpuCopies = Field(default_factory=GpuCopies)
    kernels: GpuKernels = Field(default_factory=GpuKernels)
    busy_timeline_share: list[float] = Field(default_factory=list)  # busy share per slice
    # While this GPU was idle, what the host did: share of the window per HostActivity.
    idle_while_host_share: dict[str, float] = Field(default_factory=dict)


class HostLane(ReadsOldPercentages):
    """What one host did over the capture, slice by slice (the report's host lane)."""

    old_percentages: ClassVar[dict[str, str]] = {"busy_pct": "busy_share"}

    host: str
    window_ms: float
    slice_ms: float
    activity: list[HostActivity] = Field(default_factory=list)  # the most of each slice
    busy_share: dict[str, float] = Field(default_factory=dict)  # of the window, per activity


class GpuActivity(BaseModel):
    devices: list[GpuDevice] = Field(default_factory=list)
    hosts: list[HostLane] = Field(default_factory=list)
    slices: int = 0

    @property
    def active(self) -> list[GpuDevice]:
        """The GPUs that ran at least one kernel in the capture."""
        return [d for d in self.devices if d.kernels.count]

    def idle_while(self, activity: HostActivity) -> float:
        """The share of the capture the GPUs (the active ones, on average) idled while the host
        did `activity`."""
        active = self.active
        if not active:
            return 0.0
        return round(
            sum(d.idle_while_host_share.get(activity.value, 0.0) for d in active) / len(active), 3
        )

    @property
    def idle_share(self) -> float | None:
        active = self.active
        return round(sum(d.idle_share for d in active) / len(active), 3) if active else None
