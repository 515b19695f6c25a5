"""Memory: growth toward an out-of-memory kill, peak near capacity, fragmentation, temporaries."""

from __future__ import annotations

from profiler_service.analysis.evidence import (
    AliveAtPeak,
    KeptAcrossSteps,
    MemoryFragmentationEvidence,
    MemoryGrowthEvidence,
    MemoryPressureEvidence,
    MemoryTemporariesEvidence,
)
from profiler_service.analysis.models import (
    AllocatorMemory,
    Finding,
    ProcessMemory,
    Severity,
    Summary,
)
from profiler_service.analysis.rules.registry import rule

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


@rule("memory_pressure", evidence=MemoryPressureEvidence)
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


@rule("memory_fragmentation", evidence=MemoryFragmentationEvidence)
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


@rule("memory_temporaries", evidence=MemoryTemporariesEvidence)
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


@rule("memory_growth", evidence=MemoryGrowthEvidence)
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
