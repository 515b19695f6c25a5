"""Memory's evidence (rules/memory.py): peak near capacity, fragmentation, temporaries, growth
toward an out-of-memory kill."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from profiler_service.analysis.evidence.base import Evidence

__all__ = [
    "AliveAtPeak",
    "KeptAcrossSteps",
    "MemoryFragmentationEvidence",
    "MemoryGrowthEvidence",
    "MemoryPressureEvidence",
    "MemoryTemporariesEvidence",
]


class MemoryPressureEvidence(Evidence):
    """memory_pressure: the allocator whose peak comes nearest its capacity."""

    allocator: str = Field(description="the allocator (GPU_0_bfc, cpu, ...)")
    peak_bytes_in_use: int = Field(description="its peak memory in use, in bytes")
    capacity_bytes: int | None = Field(description="its capacity, in bytes")
    peak_share_of_capacity: float = Field(description="the peak's share (0-1) of the capacity")


class MemoryFragmentationEvidence(Evidence):
    """memory_fragmentation: the allocator most fragmented at its peak."""

    allocator: str = Field(description="the allocator")
    fragmentation_share: float = Field(
        description="the share (0-1) of its memory fragmented at the peak"
    )
    peak_share_of_capacity: float = Field(description="the peak's share (0-1) of its capacity")


class MemoryTemporariesEvidence(Evidence):
    """memory_temporaries: the peak held by concat/stack-style temporaries."""

    allocator: str = Field(description="the allocator")
    temporaries_bytes: int = Field(description="the temporaries' bytes at the peak")
    peak_bytes_in_use: int = Field(description="its peak memory in use, in bytes")
    ops: list[str] = Field(description="the ops that allocated the temporaries")


class KeptAcrossSteps(Evidence):
    """Allocations of one op and shape made in the capture's first half and alive at its end
    (memory_growth's `kept_allocations`)."""

    op: str = Field(description="the op that allocated them")
    shape: str = Field(description="their shape")
    count: int = Field(description="how many stayed allocated")
    bytes: int = Field(description="their bytes, all together")
    first_ms: float = Field(
        description="when the first was allocated, from the capture's first memory event"
    )


class AliveAtPeak(Evidence):
    """XProf's active allocations at the peak of one op and shape (memory_growth's
    `alive_at_peak`)."""

    op: str = Field(description="the op that allocated them")
    shape: str = Field(description="their shape")
    bytes: int = Field(description="their bytes, all together")
    step: int | None = Field(description="the step they were made in, where marked")


class MemoryGrowthEvidence(Evidence):
    """memory_growth: each step's low point rising along a line, when it reaches capacity,
    and what stays allocated."""

    allocator: str = Field(description="the allocator that grows (the one nearest capacity)")
    bytes_per_s: float = Field(description="the low point's growth, in bytes a second")
    bytes_per_step: float | None = Field(
        description="the same, in bytes a step, where the steps are marked"
    )
    growth_bytes: int = Field(description="its growth over the capture, by the fitted line")
    r2: float = Field(description="how steady the growth is: 1.0 is a straight line")
    rising_share: float = Field(
        description="the share (0-1) of low points above the one (or two) before"
    )
    basis: Literal["steps", "time"] = Field(
        description="what the low points are: `steps` (each marked step's) or `time` (no markers)"
    )
    points: int = Field(description="the low points compared")
    peak_bytes_in_use: int = Field(description="the allocator's peak memory in use, in bytes")
    capacity_bytes: int | None = Field(description="its capacity, in bytes")
    seconds_to_capacity: float | None = Field(
        description="at this rate, the seconds until it is full (a host allocator: until the "
        "process reaches its memory limit)"
    )
    process_rss_bytes: int | None = Field(
        description="a host allocator: the process's resident memory, where the sampler read it"
    )
    process_limit_bytes: int | None = Field(
        description="a host allocator: the process's memory limit (cgroup), where read"
    )
    kept_allocations: list[KeptAcrossSteps] = Field(
        description="what stayed allocated across steps, by op and shape, the most bytes first"
    )
    alive_at_peak: list[AliveAtPeak] = Field(
        description="XProf's active allocations at the peak, the largest first"
    )
    alive_before_capture_bytes: int = Field(
        description="bytes alive at the peak but allocated before the capture began (XProf's "
        "preallocated)"
    )
