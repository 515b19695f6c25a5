"""Several workers' evidence (rules/distributed.py): the straggler."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from profiler_service.analysis.evidence.base import Evidence

__all__ = ["StragglerEvidence"]


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
