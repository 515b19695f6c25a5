"""Device memory: peak near capacity, fragmentation, temporaries kept alive."""

from __future__ import annotations

from profiler_service.analysis.models import AllocatorMemory, Finding, Severity, Summary
from profiler_service.analysis.rules import rule

PEAK_CRITICAL_SHARE = 0.90
PEAK_WARNING_SHARE = 0.80
FRAGMENTATION_WARNING_SHARE = 0.30
FRAGMENTATION_MIN_PEAK_SHARE = 0.50  # fragmentation only hurts when memory is tight
TEMPORARIES_WARNING_SHARE = 0.20


def _worst(summary: Summary, key) -> AllocatorMemory | None:
    candidates = [m for m in summary.memory if key(m) is not None]
    return max(candidates, key=key, default=None)


@rule("memory_pressure")
def memory_pressure(summary: Summary) -> Finding | None:
    m = _worst(summary, lambda a: a.peak_share_of_capacity)
    if m is None or m.peak_share_of_capacity < PEAK_WARNING_SHARE:
        return None
    severity = (
        Severity.CRITICAL if m.peak_share_of_capacity >= PEAK_CRITICAL_SHARE else Severity.WARNING
    )
    return Finding(
        rule="memory_pressure",
        severity=severity,
        title=f"Memory peaks at {m.peak_share_of_capacity:.0%} of {m.allocator}'s capacity",
        evidence={
            "allocator": m.allocator,
            "peak_bytes_in_use": m.peak_bytes_in_use,
            "capacity_bytes": m.capacity_bytes,
            "peak_share_of_capacity": m.peak_share_of_capacity,
        },
        recommendation="One larger batch or model from out-of-memory: reduce the batch, use "
        "mixed precision, recompute activations (gradient checkpointing), and "
        "release large temporaries early.",
        docs="https://www.tensorflow.org/guide/profiler#memory_profile_tool",
    )


@rule("memory_fragmentation")
def memory_fragmentation(summary: Summary) -> Finding | None:
    m = _worst(summary, lambda a: a.fragmentation_share)
    if (
        m is None
        or m.fragmentation_share < FRAGMENTATION_WARNING_SHARE
        or (m.peak_share_of_capacity or 0) < FRAGMENTATION_MIN_PEAK_SHARE
    ):
        return None
    return Finding(
        rule="memory_fragmentation",
        severity=Severity.WARNING,
        title=f"{m.allocator} is {m.fragmentation_share:.0%} fragmented at its peak",
        evidence={
            "allocator": m.allocator,
            "fragmentation_share": m.fragmentation_share,
            "peak_share_of_capacity": m.peak_share_of_capacity,
        },
        recommendation="Allocations of many sizes leave holes: use fixed shapes (pad or "
        "bucket), and avoid growing tensors step by step.",
    )


@rule("memory_temporaries")
def memory_temporaries(summary: Summary) -> Finding | None:
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
        rule="memory_temporaries",
        severity=Severity.WARNING,
        title=f"{temp_share:.0%} of peak memory is temporaries from concat/stack-style ops",
        evidence={
            "allocator": m.allocator,
            "temporaries_bytes": m.peak_temporaries_bytes,
            "peak_bytes_in_use": m.peak_bytes_in_use,
            "ops": m.peak_temporaries_ops,
        },
        recommendation="Concatenating or stacking in a loop keeps every intermediate alive: "
        "collect into a `tf.TensorArray`, preallocate, or drop references so "
        "the allocator can reuse the memory.",
        impact_share=temp_share,
    )
