"""Memory: growth toward an out-of-memory kill, peak near capacity, fragmentation, temporaries;
each rule with its evidence, what its fix saves (no step time) and its advice for JAX."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from profiler_service.analysis.findings.advice import Advice
from profiler_service.analysis.findings.impact import nothing
from profiler_service.analysis.findings.registry import rule
from profiler_service.analysis.models import (
    AllocatorMemory,
    Finding,
    Impact,
    ProcessMemory,
    Severity,
    Summary,
)
from profiler_service.analysis.rule import Evidence, Rule


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


def memory_saving(finding: Finding, summary: Summary) -> Impact:
    """Memory findings keep a job alive or let it grow its batch; they save no step time."""
    return nothing(summary, "this fix is about memory (an OOM avoided, a larger batch possible)")


MEMORY_PRESSURE_ADVICE = Advice(
    jax="One larger batch or model from out-of-memory: reduce the batch, compute "
    "in bfloat16, recompute activations (`jax.checkpoint` around the blocks), donate the state "
    "the step replaces (`donate_argnums`), and mind JAX's preallocation "
    "(`XLA_PYTHON_CLIENT_MEM_FRACTION`) when something else shares the device.",
)

MEMORY_TEMPORARIES_ADVICE = Advice(
    jax="Growing arrays step by step keeps every intermediate alive: "
    "preallocate and write with `.at[i].set(...)` inside the jitted step, or loop with "
    "`jax.lax.scan`, which XLA lays out once.",
)

MEMORY_GROWTH_ADVICE = Advice(
    jax="Something keeps each step's arrays alive: device arrays appended to a "
    "Python list (losses, outputs, metrics kept as arrays instead of `float()` every N steps), "
    "new shapes compiling new executables that `jax.jit` caches (pad to fixed shapes), and "
    "state not donated to the step that replaces it (`donate_argnums`).",
)


PEAK_CRITICAL_SHARE = 0.90
PEAK_WARNING_SHARE = 0.80
FRAGMENTATION_WARNING_SHARE = 0.30
FRAGMENTATION_MIN_PEAK_SHARE = 0.50  # fragmentation only hurts when memory is tight
TEMPORARIES_WARNING_SHARE = 0.20
# memory_growth: each step's low point rises along a steady line (R² and share of rises) in
# both halves of the capture, and either reaches capacity within a day or grew this much.
MEMORY_GROWTH_MIN_R2 = 0.80
MEMORY_GROWTH_MIN_RISING_SHARE = 0.60
MEMORY_GROWTH_WARNING_S = 24 * 3600.0
MEMORY_GROWTH_CRITICAL_S = 3600.0
MEMORY_GROWTH_MIN_SHARE_OF_PEAK = 0.05  # without a capacity, or with one a day or more away
MEMORY_GROWTH_MIN_BYTES = 1 << 20  # below a MiB over the capture, growth is noise


def _worst(summary: Summary, key) -> AllocatorMemory | None:
    candidates = [m for m in summary.memory if key(m) is not None]
    return max(candidates, key=key, default=None)


@rule(
    Rule.MEMORY_PRESSURE,
    evidence=MemoryPressureEvidence,
    impact=memory_saving,
    advice=MEMORY_PRESSURE_ADVICE,
)
def memory_pressure(summary: Summary) -> Finding | None:
    """An allocator's peak reaches `PEAK_WARNING_SHARE` (warning) or `PEAK_CRITICAL_SHARE`
    (critical) of its capacity.
    """
    m = _worst(summary, lambda a: a.peak_share_of_capacity)
    if m is None or m.peak_share_of_capacity < PEAK_WARNING_SHARE:
        return None
    severity = (
        Severity.CRITICAL if m.peak_share_of_capacity >= PEAK_CRITICAL_SHARE else Severity.WARNING
    )
    return Finding(
        severity=severity,
        title=f"Memory peaks at {m.peak_share_of_capacity:.0%} of {m.allocator}'s capacity",
        evidence=MemoryPressureEvidence(
            allocator=m.allocator,
            peak_bytes_in_use=m.peak_bytes_in_use,
            capacity_bytes=m.capacity_bytes,
            peak_share_of_capacity=m.peak_share_of_capacity,
        ).model_dump(),
        recommendation="One larger batch or model from out-of-memory: reduce the batch, use "
        "mixed precision, recompute activations (gradient checkpointing), and "
        "release large temporaries early.",
        docs="https://www.tensorflow.org/guide/profiler#memory_profile_tool",
    )


@rule(
    Rule.MEMORY_FRAGMENTATION,
    evidence=MemoryFragmentationEvidence,
    impact=memory_saving,
)
def memory_fragmentation(summary: Summary) -> Finding | None:
    """At least `FRAGMENTATION_WARNING_SHARE` of memory is fragmented at the peak while at
    least `FRAGMENTATION_MIN_PEAK_SHARE` of capacity is used.
    """
    m = _worst(summary, lambda a: a.fragmentation_share)
    if (
        m is None
        or m.fragmentation_share < FRAGMENTATION_WARNING_SHARE
        or (m.peak_share_of_capacity or 0) < FRAGMENTATION_MIN_PEAK_SHARE
    ):
        return None
    return Finding(
        severity=Severity.WARNING,
        title=f"{m.allocator} is {m.fragmentation_share:.0%} fragmented at its peak",
        evidence=MemoryFragmentationEvidence(
            allocator=m.allocator,
            fragmentation_share=m.fragmentation_share,
            peak_share_of_capacity=m.peak_share_of_capacity,
        ).model_dump(),
        recommendation="Allocations of many sizes leave holes: use fixed shapes (pad or "
        "bucket), and avoid growing tensors step by step.",
    )


@rule(
    Rule.MEMORY_TEMPORARIES,
    evidence=MemoryTemporariesEvidence,
    impact=memory_saving,
    advice=MEMORY_TEMPORARIES_ADVICE,
)
def memory_temporaries(summary: Summary) -> Finding | None:
    """At least `TEMPORARIES_WARNING_SHARE` of the peak is held by concat/stack-style
    temporaries.
    """
    m = _worst(
        summary,
        lambda a: a.peak_temporaries_bytes / a.peak_bytes_in_use if a.peak_bytes_in_use else None,
    )
    if m is None or not m.peak_bytes_in_use:
        return None
    temp_share = m.peak_temporaries_bytes / m.peak_bytes_in_use
    if temp_share < TEMPORARIES_WARNING_SHARE:
        return None
    return Finding(
        severity=Severity.WARNING,
        title=f"{temp_share:.0%} of peak memory is temporaries from concat/stack-style ops",
        evidence=MemoryTemporariesEvidence(
            allocator=m.allocator,
            temporaries_bytes=m.peak_temporaries_bytes,
            peak_bytes_in_use=m.peak_bytes_in_use,
            ops=m.peak_temporaries_ops,
        ).model_dump(),
        recommendation="Concatenating or stacking in a loop keeps every intermediate alive: "
        "collect into a `tf.TensorArray`, preallocate, or drop references so "
        "the allocator can reuse the memory.",
        impact_share=temp_share,
    )


def _process_limit(m: AllocatorMemory, summary: Summary) -> ProcessMemory | None:
    """A host allocator lives in the process's RSS, whose cgroup limit (when the sampler read
    it) is what an OOM kill enforces, not the host's memory that XProf reports as capacity."""
    return None if m.allocator.upper().startswith("GPU") else summary.process_memory


def _to_capacity(m: AllocatorMemory, summary: Summary) -> float | None:
    """Seconds to capacity (or to the process's limit) at the growth rate."""
    g, process = m.growth, _process_limit(m, summary)
    if g is None or g.bytes_per_s <= 0:
        return None
    if process is not None:
        return round(max(0, process.limit_bytes - process.rss_bytes) / g.bytes_per_s, 1)
    return g.seconds_to_capacity


def is_growing(m: AllocatorMemory, summary: Summary) -> bool:
    """The memory_growth rule's reading of one allocator (step_temporaries, which says "not a
    leak", is silenced wherever it fires)."""
    g = m.growth
    to_capacity = _to_capacity(m, summary)
    return bool(
        g is not None
        and g.bytes_per_s > 0
        and g.growth_bytes >= MEMORY_GROWTH_MIN_BYTES
        and g.r2 >= MEMORY_GROWTH_MIN_R2
        and g.rising_share >= MEMORY_GROWTH_MIN_RISING_SHARE
        and g.first_half_bytes_per_s > 0
        and g.second_half_bytes_per_s > 0
        and (
            (to_capacity is not None and to_capacity <= MEMORY_GROWTH_WARNING_S)
            or g.growth_bytes >= MEMORY_GROWTH_MIN_SHARE_OF_PEAK * max(m.peak_bytes_in_use, 1)
        )
    )


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@rule(
    Rule.MEMORY_GROWTH,
    evidence=MemoryGrowthEvidence,
    impact=memory_saving,
    advice=MEMORY_GROWTH_ADVICE,
)
def memory_growth(summary: Summary) -> Finding | None:
    """Memory in use at each step's low point rises along a line (R² and share of rising
    steps at least `MEMORY_GROWTH_MIN_R2` and `MEMORY_GROWTH_MIN_RISING_SHARE`, rising in
    both halves of the capture, by at least `MEMORY_GROWTH_MIN_BYTES`) and reaches capacity
    within `MEMORY_GROWTH_WARNING_S` or grew `MEMORY_GROWTH_MIN_SHARE_OF_PEAK` of the peak;
    critical when capacity is `MEMORY_GROWTH_CRITICAL_S` or less away. Names what is kept.
    """
    growing = [m for m in summary.memory if is_growing(m, summary)]
    if not growing:
        return None
    m = min(growing, key=lambda a: _to_capacity(a, summary) or float("inf"))
    g = m.growth
    soon = _to_capacity(m, summary)
    critical = soon is not None and soon <= MEMORY_GROWTH_CRITICAL_S
    process = _process_limit(m, summary)
    rate = f"{_mib(g.bytes_per_s)}/s"
    if g.bytes_per_step is not None:
        rate += f" ({_mib(g.bytes_per_step)} per step)"
    when = (
        f"; at this rate {'the process reaches its memory limit' if process else 'it is full'}"
        f" in {_duration(soon)}"
        if soon is not None
        else ""
    )
    kept = [
        KeptAcrossSteps(
            op=k.op_name, shape=k.shape, count=k.count, bytes=k.bytes, first_ms=k.first_time_ms
        )
        for k in m.kept_allocations
    ]
    alive = [
        AliveAtPeak(op=a.op_name, shape=a.shape, bytes=a.bytes * a.occurrences, step=a.step)
        for a in m.alive_at_peak
    ]
    if m.kept_allocations:
        k = m.kept_allocations[0]
        culprit = (
            f" Kept across steps: {k.count} outputs of `{k.op_name}` {k.shape} ({_mib(k.bytes)})."
        )
    elif m.alive_at_peak:
        culprit = (
            " Largest allocations alive at the peak: "
            + ", ".join(f"`{a.op}` {a.shape} ({_mib(a.bytes)})" for a in alive[:3])
            + "."
        )
    else:
        culprit = ""
    return Finding(
        severity=Severity.CRITICAL if critical else Severity.WARNING,
        title=f"Memory in use on {m.allocator} grows by {rate} at every step's low point{when}",
        evidence=MemoryGrowthEvidence(
            allocator=m.allocator,
            bytes_per_s=g.bytes_per_s,
            bytes_per_step=g.bytes_per_step,
            growth_bytes=g.growth_bytes,
            r2=g.r2,
            rising_share=g.rising_share,
            basis=g.basis,
            points=g.points,
            peak_bytes_in_use=m.peak_bytes_in_use,
            capacity_bytes=m.capacity_bytes,
            seconds_to_capacity=soon,
            process_rss_bytes=process.rss_bytes if process else None,
            process_limit_bytes=process.limit_bytes if process else None,
            kept_allocations=kept,
            alive_at_peak=alive,
            alive_before_capture_bytes=m.alive_before_capture_bytes,
        ).model_dump(),
        recommendation="Something keeps each step's tensors alive." + culprit + " Look for: "
        "references kept across steps (outputs or losses appended to a Python list, metrics "
        "summed as tensors instead of with `.numpy()`/`tf.keras.metrics`); concat/stack in a "
        "loop that keeps every intermediate (use `tf.TensorArray` or preallocate); "
        "`tf.function` retracing, where each new shape or Python value builds and keeps a new "
        "graph (fix `input_signature`, pass tensors not Python numbers); variables that grow "
        "(`tf.Variable(..., shape=tf.TensorShape(None))` assigned larger values, lookup tables "
        "and caches without a bound).",
        docs="https://www.tensorflow.org/guide/profiler#memory_profile_tool",
        impact_share=1.0 if critical else 0.0,
    )
