"""What a snapshot keeps of the minutes before it: named time series, the same shape whatever
their source (the service's own sampler, or Prometheus's `query_range`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class Series(BaseModel):
    """One time series: `points` are `[unix seconds, value]`, oldest first."""

    name: str  # step_time_ms, memory_in_use_bytes, rss_bytes, ... or a configured PromQL name
    unit: str = ""  # ms, bytes, ratio, count
    source: str  # "agent", "proc", "nvml", "prometheus"
    labels: dict[str, str] = Field(default_factory=dict)
    query: str | None = None  # the PromQL sent, after templating (Prometheus series only)
    points: list[tuple[float, float]] = Field(default_factory=list)


class LeadUp(BaseModel):
    """The samples from `start` to `end`: the look-back before the capture and the capture."""

    start: datetime
    end: datetime
    series: list[Series] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # what could not be read, and why
