"""Several workers in one capture: one slower worker holds every synchronous step back."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from profiler_service.analysis.findings.impact import device_wait
from profiler_service.analysis.findings.registry import rule
from profiler_service.analysis.models import (
    Finding,
    Severity,
    Summary,
)
from profiler_service.analysis.rule import Evidence, Rule


class StragglerEvidence(Evidence):
    """straggler: each worker's busy time a step, and what slows the busiest one."""

    straggler: str = Field(description="the busiest worker (host), which the others wait for")
    busy_ms_by_host: dict[str, float] = Field(
        description="each worker's mean busy time a step, in milliseconds"
    )
    input_ms_by_host: dict[str, float] = Field(
        description="each worker's mean input time a step, in milliseconds"
    )
    host_collectives_ms_by_host: dict[str, float] = Field(
        description="each worker's mean time a step in collectives run on the host"
    )
    step_time_ms_avg: float = Field(description="the straggler's mean step time")
    slowed_by: Literal["its input pipeline", "its own compute"] = Field(
        description="what slows it: its input pipeline (input is at least half its busy "
        "time), else its own compute"
    )


# The slowest worker's busy time over the fastest's, and its excess as a share of step time.
STRAGGLER_RATIO = 1.25
STRAGGLER_MIN_STEP_SHARE = 0.10


_INPUT_ADVICE = (
    "check its data shard and reader (a bigger or slower shard, a slower disk or network "
    "mount) and balance the per-worker input so no worker reads more than the others."
)
_COMPUTE_ADVICE = (
    "check what only it runs in the step (work on the chief alone: logging, summaries, "
    "evaluation, checkpoint writes), a larger per-worker batch, and its machine (CPU "
    "contention, thermal limits, a slower or shared GPU, a noisy neighbour)."
)


@rule(
    Rule.STRAGGLER,
    evidence=StragglerEvidence,
    impact=device_wait,
)
def straggler(summary: Summary) -> Finding | None:
    """In a multi-worker capture, the busiest worker's busy time is at least
    `STRAGGLER_RATIO` times the least busy one's and the excess is at least
    `STRAGGLER_MIN_STEP_SHARE` of the step; names the worker and whether its input or its
    compute slows it.
    """
    hosts = [h for h in summary.per_host if h.busy_ms_avg is not None and h.step_time_ms_avg]
    if len(hosts) < 2:
        return None
    slow = max(hosts, key=lambda h: h.busy_ms_avg)
    fast = min(hosts, key=lambda h: h.busy_ms_avg)
    excess_share = (slow.busy_ms_avg - fast.busy_ms_avg) / slow.step_time_ms_avg
    if slow.busy_ms_avg < STRAGGLER_RATIO * max(fast.busy_ms_avg, 1e-9) or (
        excess_share < STRAGGLER_MIN_STEP_SHARE
    ):
        return None
    parts = slow.breakdown_avg
    cause = "its input pipeline" if parts.input_ms >= slow.busy_ms_avg / 2 else "its own compute"
    return Finding(
        severity=Severity.WARNING,
        title=f"Worker {slow.host} is the straggler: busy {slow.busy_ms_avg:g} ms per step "
        f"against {fast.busy_ms_avg:g} ms on {fast.host}; the others wait for it",
        evidence=StragglerEvidence(
            straggler=slow.host,
            busy_ms_by_host={h.host: h.busy_ms_avg for h in hosts},
            input_ms_by_host={h.host: h.breakdown_avg.input_ms for h in hosts},
            host_collectives_ms_by_host={h.host: h.host_collectives_ms_avg for h in hosts},
            step_time_ms_avg=slow.step_time_ms_avg,
            slowed_by=cause,
        ).model_dump(),
        recommendation=f"Every synchronous step waits for {slow.host}, slowed by {cause}: "
        + (_INPUT_ADVICE if cause == "its input pipeline" else _COMPUTE_ADVICE),
        docs="https://www.tensorflow.org/guide/distributed_training",
        impact_share=excess_share,
    )
