"""The summary's memory: each allocator's peak, timeline and growth, what it kept and what each
op allocates a step (analysis/readers/: memory.py, kept_memory.py, step_allocations.py read
them), and why a capture holds no memory events (memory_events.py). Part of `models.Summary`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class MemoryPoint(BaseModel):
    time_ms: float
    bytes_in_use: int


class MemoryGrowth(BaseModel):
    """Memory in use at the same point of each step (its low point), fitted with a line.

    The low point of a step is what survives it: the allocate-and-free sawtooth inside a step
    does not move it, references kept across steps do.
    """

    basis: str  # "steps" (low point per marked step or group of steps) or "time" (no markers)
    points: int  # low points compared
    steps: int = 0  # steps they cover
    bytes_per_step: float | None = None
    bytes_per_s: float
    r2: float  # how steady: 1.0 is a straight line
    rising_share: float  # share of low points above the one (or two) before: memory.py
    first_half_bytes_per_s: float
    second_half_bytes_per_s: float
    growth_bytes: int  # over the capture, by the fitted line
    seconds_to_capacity: float | None = None  # from the peak, at this rate


class KeptAllocation(BaseModel):
    """Allocations of one op and shape made during the capture and never freed in it."""

    op_name: str
    shape: str = ""
    count: int
    bytes: int
    first_time_ms: float  # from the first memory event of the capture


class PeakAllocation(BaseModel):
    """One of XProf's active allocations at the peak (made in the peak's step)."""

    op_name: str
    shape: str = ""
    data_type: str = ""
    bytes: int
    occurrences: int = 1
    step: int | None = None
    time_ms: float  # from the start of the timeline


class OpAllocations(BaseModel):
    """What one op allocates on an allocator in each step, and the most of it alive at once."""

    op_name: str
    shapes: list[str] = Field(default_factory=list)  # its largest allocations' shapes
    bytes_per_step: float
    count_per_step: float
    peak_alive_bytes: int  # the most bytes of its allocations alive at one time


class AllocatorMemory(BaseModel):
    allocator: str
    peak_bytes_in_use: int
    capacity_bytes: int | None = None
    peak_share_of_capacity: float | None = None
    fragmentation_share: float | None = None
    timeline: list[MemoryPoint] = Field(default_factory=list)
    # At the peak: bytes held by allocations from concat/stack-style ops (temporaries).
    peak_temporaries_bytes: int = 0
    peak_temporaries_ops: list[str] = Field(default_factory=list)
    # Memory in use at each step's low point (see MemoryGrowth), and its fitted growth.
    step_floors: list[MemoryPoint] = Field(default_factory=list)
    growth: MemoryGrowth | None = None
    # Made in the capture's first half and alive at its end, by op and shape, the largest
    # first; read from the capture's memory events only when the low points grow.
    kept_allocations: list[KeptAllocation] = Field(default_factory=list)
    # Alive at the peak but allocated before the capture began (XProf's "preallocated").
    alive_before_capture_bytes: int = 0
    # XProf's active allocations at the peak, the largest first.
    alive_at_peak: list[PeakAllocation] = Field(default_factory=list)
    # What each op allocates per marked step, the most first; read from the capture's memory
    # events where the steps rise and fall (step_allocations.py).
    allocations_by_op: list[OpAllocations] = Field(default_factory=list)


class MemoryUnrecorded(BaseModel):
    """Hosts whose capture holds no allocator event: why, what turns them on, what that costs
    (memory_events.py). The memory findings are silent there for want of data, not by verdict."""

    hosts: list[str]
    why: str
    remedy: str
    cost: str

    @property
    def sentence(self) -> str:
        return f"{self.why} {self.remedy} {self.cost}"
