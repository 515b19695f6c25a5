"""The pipeline's settings groups: bounds, capture, analysis, schedules, look-back, memory watch."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from profiler_service.config.base import Group, check_url
from profiler_service.probes.python_stacks import DEFAULT_HZ
from profiler_service.targets import TARGET_NAME_PATTERN, Target


class PromQuery(BaseModel):
    """A PromQL expression stored with every snapshot's lead-up, under `name`."""

    name: str = Field(min_length=1, max_length=64)
    expr: str = Field(min_length=1)
    unit: str = ""


# Asked when PROFILER_PROMETHEUS_URL is set and no queries are configured: the job's step time
# from our own metrics (agent) and the GPU's engine activity from NVIDIA's DCGM exporter.
DEFAULT_PROM_QUERIES = (
    PromQuery(
        name="step_time_ms",
        expr="1000 * sum(rate(profiler_training_step_duration_seconds_sum{pod=$pod}[1m]))"
        " / sum(rate(profiler_training_step_duration_seconds_count{pod=$pod}[1m]))",
        unit="ms",
    ),
    PromQuery(
        name="gpu_engine_active",
        expr="avg(DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod=$pod})",
        unit="ratio",
    ),
    PromQuery(
        name="memory_working_set_bytes",
        expr='sum(container_memory_working_set_bytes{pod=$pod, container!=""})',
        unit="bytes",
    ),
)


class Schedule(BaseModel):
    """Periodic captures of one target; off unless configured."""

    target: str = Field(pattern=TARGET_NAME_PATTERN)
    interval_s: float = Field(ge=10)
    jitter_s: float = Field(default=0.0, ge=0)
    duration_s: float | None = Field(default=None, gt=0)
    labels: dict[str, str] = Field(default_factory=dict)


class BoundsSettings(Group):
    """How long a capture may last and take, end to end: the controller holds every trigger to
    them, and the hub waits for a sidecar by them."""

    duration_default_s: float = Field(
        default=5.0, gt=0, description="Capture length when none is given."
    )
    duration_min_s: float = Field(default=0.1, gt=0, description="Shortest capture allowed.")
    duration_max_s: float = Field(
        default=60.0,
        gt=0,
        description="Longest capture allowed. TF traces beyond ~10 s can exhaust the job's "
        "memory and end in DEADLINE_EXCEEDED (tensorflow#61526): raise with care.",
    )
    capture_grace_s: float = Field(
        default=30.0, gt=0, description="A capture is stopped and failed after duration + this."
    )
    analysis_timeout_s: float = Field(
        default=300.0, gt=0, description="Analysis is stopped and failed after this."
    )

    @model_validator(mode="after")
    def _check(self) -> BoundsSettings:
        if not self.duration_min_s <= self.duration_default_s <= self.duration_max_s:
            raise ValueError(
                f"duration_default_s={self.duration_default_s} must lie within "
                f"[{self.duration_min_s}, {self.duration_max_s}]"
            )
        return self

    def within(self, duration_s: float) -> bool:
        """Whether a configured duration keeps the bounds (checked where it is configured)."""
        return self.duration_min_s <= duration_s <= self.duration_max_s


class CaptureSettings(Group):
    """What may be captured, and how: the targets, the tracer options, what each snapshot is
    stamped with."""

    targets: Annotated[list[Target], NoDecode] = Field(
        default_factory=list,
        description="What may be captured: `[NAME=]grpc://HOST:PORT[,...]`, "
        "`[NAME=]tf-config://[PATH][?tasks=...&port=N]` or `[NAME=]dns://NAME:PORT`, several "
        "separated by spaces or `;`, or a JSON list of `{name, workers}` / `{name, discover}`.",
    )
    url: Annotated[str | None, AfterValidator(check_url)] = Field(
        default=None,
        validation_alias="capture_url",
        description="URL the job's profiler writes captures to when it shares no volume with "
        "the service (`gs://bucket/incoming`); read back with fsspec. Must lie outside "
        "`store_url`.",
    )
    attempts: int = Field(
        default=2,
        validation_alias="capture_attempts",
        ge=1,
        le=10,
        description="The capture client's tracing attempts.",
    )
    max_workers: int = Field(
        default=32,
        validation_alias="capture_max_workers",
        ge=1,
        le=1024,
        description="Most workers of a discovered target (`tf-config://`, `dns://`) captured at "
        "once: the first ones, the chief first.",
    )
    host_tracer_level: int = Field(default=2, ge=0, le=3, description="Default host tracer level.")
    python_tracer_level: int = Field(
        default=0, ge=0, le=1, description="Default Python tracer level."
    )
    device_tracer_level: int = Field(
        default=1, ge=0, le=1, description="Default device tracer level."
    )
    include_dataset_ops: bool = Field(
        default=True,
        description="Trace tf.data ops (the input pipeline analysis needs them).",
    )
    python_stacks_hz: float = Field(
        default=DEFAULT_HZ,
        ge=0,
        le=1000,
        description="In-process (the agent): sample every Python thread's stack this many times "
        "a second while a trace runs, stored beside it as collapsed stacks "
        "(`python.stacks.folded`, for flamegraph.pl or speedscope); findings then name the "
        "user's code (`where`). 0: no stacks. What it costs the job's steps: "
        "bench/bench_stacks.py.",
    )
    py_spy: bool = Field(
        default=False,
        description="From a sidecar: sample the job's Python stacks with py-spy (at "
        "`python_stacks_hz`) while a trace runs, so findings name the user's code as through "
        "the agent. py-spy reads the job's memory: the pod must share its process namespace "
        "and grant the sidecar `SYS_PTRACE` (the Helm chart's `sidecar.pySpy.enabled`); "
        "where it cannot, the snapshot says why.",
    )
    py_spy_pid: int | None = Field(
        default=None,
        ge=1,
        description="The job's process for py-spy; unset: the process listening on the "
        "target's local port.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        validation_alias="capture_labels",
        description='Labels (JSON object) added to every capture, e.g. `{"model_version": "v7"}`.',
    )
    pod_name: str | None = Field(
        default=None,
        description="`$pod` in the queries (the Helm chart sets it from the downward API).",
    )
    pod_namespace: str | None = Field(default=None, description="`$namespace` in the queries.")
    workload: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$",
        description="The job this sidecar profiles, as the fleet hub tells jobs apart: its "
        "Deployment, Job or JobSet (the Helm chart: the release name, or a pod label, "
        "`workload.fromLabel`). Recorded in every snapshot. Unset: the hub keys the job by its "
        "target's name.",
    )

    @field_validator("workload", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """The chart's downward API gives "" when the pod lacks the label."""
        return value or None

    @field_validator("targets", mode="before")
    @classmethod
    def _parse_targets(cls, value: Any) -> Any:
        """Accept a JSON list, or specs separated by spaces/semicolons (`a=grpc://h:1 b=grpc://h:2`)."""
        if isinstance(value, str):
            text = value.strip()
            if not text:
                return []
            if text.startswith("["):
                value = json.loads(text)
            else:
                value = [s for s in re.split(r"[;\s]+", text) if s]
        items = []
        for i, item in enumerate(value or []):
            if isinstance(item, str):
                item = Target.parse(item, default_name="default" if i == 0 else f"target-{i}")
            items.append(item)
        return items

    @model_validator(mode="after")
    def _check(self) -> CaptureSettings:
        names = self.target_names
        if len(names) != len(set(names)):
            raise ValueError(f"target names must be unique, got {names}")
        return self

    @property
    def target_names(self) -> list[str]:
        return [t.name for t in self.targets]

    def target(self, name: str | None) -> Target | None:
        """The named target, or the only/first one when no name is given."""
        if name is None:
            return self.targets[0] if self.targets else None
        return next((t for t in self.targets if t.name == name), None)


class AnalysisSettings(Group):
    """The analysis worker: which Python, how much memory, how long a warm one lives."""

    prefix: ClassVar[str] = "analysis_"

    python: Path | None = Field(
        default=None,
        description="The Python of an environment with this project's `analysis` extra "
        "(`pip install '.[analysis]'`: XProf) that runs the analysis worker: how an agent in "
        "a pinned job analyses. "
        "Unset: this process's own Python.",
    )
    max_memory_bytes: int | None = Field(
        default=None,
        gt=0,
        description="The analysis worker is stopped past this resident memory "
        "(`analysis_too_large`, the capture kept). Unset: 3/4 of what the cgroup limit "
        "(else the host's memory) leaves beside this process.",
    )
    worker_idle_s: float = Field(
        default=900.0,
        ge=0,
        description="A warm analysis worker (XProf imported; started at start-up and kept after "
        "each analysis) exits after this long without an analysis; the next analysis then "
        "starts one after its trace (never during it: that slows the traced job). 0: each "
        "analysis starts its own worker.",
    )
    worker_max_jobs: int = Field(
        default=20,
        ge=1,
        description="A warm analysis worker is replaced after this many analyses.",
    )
    worker_recycle_bytes: int = Field(
        default=768 * 2**20,
        ge=64 * 2**20,
        description="A warm analysis worker holding more resident memory than this after an "
        "analysis is replaced: a long life must not mean a growing one.",
    )


class ScheduleSettings(Group):
    """Periodic captures (`trigger/schedule.py`)."""

    schedules: list[Schedule] = Field(
        default_factory=list,
        description="Scheduled captures: JSON list of `{target, interval_s (>= 10), jitter_s, "
        "duration_s, labels}`; a schedule that finds its target busy is skipped.",
    )


class LookbackSettings(Group):
    """The minutes before a capture: the sampler's ring, Prometheus's series, the look-back
    trace."""

    lookback_s: float = Field(
        default=300.0,
        ge=0,
        le=86400,
        description="The look-back ring holds this many seconds of samples, stored with every "
        "snapshot; 0 turns the sampler and the memory watch off.",
    )
    lookback_interval_s: float = Field(
        default=1.0, ge=0.1, le=60, description="One look-back sample this often."
    )
    watch_process: str | None = Field(
        default=None,
        description="Sidecar: the job's process, a pid or a regex searched in command lines "
        "(lowest matching pid), read through `/proc` (needs a shared PID namespace).",
    )
    job_metrics_url: Annotated[str | None, AfterValidator(check_url)] = Field(
        default=None,
        description="Sidecar: the job's own `/metrics`, read each look-back interval for its "
        "step timings (what a capture cost the job); the job serves them with "
        "`PROFILER_JOB_METRICS_PORT` in its environment (or `start_job_metrics_server`), e.g. "
        "`http://127.0.0.1:9464/metrics`.",
    )
    prometheus_url: Annotated[str | None, AfterValidator(check_url)] = Field(
        default=None,
        description="Prometheus's HTTP API: every snapshot stores `prometheus_queries` over its "
        "look-back window.",
    )
    prometheus_queries: list[PromQuery] = Field(
        default_factory=lambda: list(DEFAULT_PROM_QUERIES),
        description="JSON list of `{name, expr, unit}`; `$target`, `$pod`, `$namespace` and the "
        "trigger's labels are substituted as quoted PromQL strings. Default: step time, GPU "
        "engine activity, working set of `$pod`.",
    )
    prometheus_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="For all of a snapshot's Prometheus queries together, asked beside the "
        "analysis; what is left unasked when it is spent is noted.",
    )
    lookback_trace_s: float = Field(
        default=0.0,
        ge=0,
        le=60,
        description="The look-back trace (sidecar, TF 2.21+, single-worker targets): keep the "
        "job's profiler tracing and drop the trace every this many seconds, so captures begin "
        "up to this long before their trigger; costs the job a capture's overhead all the "
        "time. 0: off.",
    )


class WatchSettings(Group):
    """When the memory watch captures before an OOM (`trigger/memory_watch.py`)."""

    prefix: ClassVar[str] = "memory_watch_"

    enabled: bool = Field(
        default=True,
        validation_alias="memory_watch",
        description="Capture when memory nears capacity (needs the look-back sampler).",
    )
    share: float = Field(
        default=0.90,
        gt=0,
        le=1,
        description="Capture when memory in use crosses this share of capacity (not for NVML's "
        "reserved GPU memory).",
    )
    horizon_s: float = Field(
        default=600.0,
        ge=0,
        description="Capture when the growth over the window reaches capacity within this.",
    )
    growth_min_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Growth counts only once this share of capacity is in use (a job filling "
        "its buffers at start-up, far from its limit, is not captured).",
    )
    window_s: float = Field(
        default=30.0,
        ge=3,
        description="The growth is fitted over this many seconds of samples (at least half of "
        "them present).",
    )
    cooldown_s: float = Field(
        default=1800.0, ge=0, description="After a watch capture, the next no sooner than this."
    )
    duration_s: float | None = Field(
        default=None, gt=0, description="A watch capture's length. Unset: `duration_default_s`."
    )
    capacity_bytes: int | None = Field(
        default=None,
        gt=0,
        description="The job's host memory limit when its cgroup's (else the host's memory) is "
        "not what kills it; the memory rules project host growth to it too.",
    )
    target: str | None = Field(
        default=None, description="Which target the watch captures. Unset: the first target."
    )
