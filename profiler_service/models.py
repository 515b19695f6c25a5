"""The snapshot: what each pipeline stage reads and writes, and what `snapshot.json` holds."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

from pydantic import BaseModel, Field, computed_field

from profiler_service.analysis.models import Finding, Summary
from profiler_service.described import Described
from profiler_service.errors import SnapshotErrorCode
from profiler_service.lookback.models import LeadUp
from profiler_service.verification_record import StepChange, Verification

SNAPSHOT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_SNAPSHOT_ID = re.compile(SNAPSHOT_ID_PATTERN)


def is_snapshot_id(text: str) -> bool:
    """Ids become directory names: anything else (`..`, `/`) is refused before a path is built."""
    return bool(_SNAPSHOT_ID.match(text)) and ".." not in text


def new_snapshot_id(target: str, now: datetime | None = None) -> str:
    """Sortable by time, unique across sidecars (target + random suffix), a valid run name.

    48 random bits: sidecars sharing a bucket often share a target name ("default") and start
    scheduled captures in the same second; for 1,000 of them in one second, 24 bits would collide
    with a chance of about 3 %, 48 bits about 2 in a billion.
    """
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{target}-{secrets.token_hex(6)}"


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """`value` in UTC: a time without a zone is read as UTC (SQLite's columns, a query string, a
    payload that names none), one with a zone converted."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class SnapshotStatus(Described):
    """A snapshot's `status`, each with what it means."""

    CAPTURING = ("capturing", "The profiler is tracing the job.")
    ANALYZING = ("analyzing", "The capture is on disk; XProf's converters are reading it.")
    READY = ("ready", "Analysed and published: listed, and a run for XProf/TensorBoard.")
    FAILED = (
        "failed",
        "Ended with `error.code` and `error.detail`; kept files under `STORE/failed/<id>/run/`.",
    )
    INTERRUPTED = ("interrupted", "The service stopped mid-way; marked at the next start.")

    @property
    def in_flight(self) -> bool:
        return self in (SnapshotStatus.CAPTURING, SnapshotStatus.ANALYZING)


class TriggerKind(Described):
    """What started a capture (`trigger.kind`), each with what it means."""

    API = ("api", "`POST /profile`.")
    CLI = ("cli", "`profiler-service capture`.")
    WEBHOOK = ("webhook", "A Grafana or Alertmanager alert (`trigger.labels`, `annotations`, ...).")
    SCHEDULE = ("schedule", "A scheduled capture (`schedules`).")
    MEMORY_WATCH = (
        "memory_watch",
        "The memory watch, before an out-of-memory kill (`trigger.memory`).",
    )


class MemoryReading(BaseModel):
    """What the memory watch saw when it started a capture."""

    device: str  # host (the process's RSS) or GPU:N
    source: str  # agent, proc, nvml
    in_use_bytes: int
    capacity_bytes: int | None = None
    share: float | None = None  # of capacity
    bytes_per_s: float | None = None  # fitted over the watch window
    window_s: float
    seconds_to_capacity: float | None = None
    reason: str  # share (crossed PROFILER_MEMORY_WATCH_SHARE) or growth (full within horizon)


class Trigger(BaseModel):
    kind: TriggerKind = TriggerKind.API
    source: str | None = None  # who asked: client address, alert name, schedule name
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # The alert behind a webhook capture (Grafana and Alertmanager payloads); None otherwise.
    starts_at: datetime | None = None
    fingerprint: str | None = None
    generator_url: str | None = None
    dashboard_url: str | None = None  # Grafana only
    panel_url: str | None = None  # Grafana only
    memory: MemoryReading | None = None  # memory_watch only


class CaptureCost(BaseModel):
    """What taking the capture cost the job: its step time while the trace ran against just
    before, from the step timings the job reports (capture/cost.py). None where unknown, with
    `note` saying why."""

    step_ms_before: float | None = None
    step_ms_during: float | None = None
    ratio: float | None = None  # during / before: 1.05 = steps 5 % slower while traced
    steps_before: int = 0
    steps_during: int = 0
    source: str = ""  # agent: the job's own step timings; prometheus+trace: see capture/cost.py
    note: str | None = None


class CaptureOptions(BaseModel):
    duration_ms: int
    host_tracer_level: int
    python_tracer_level: int
    device_tracer_level: int
    include_dataset_ops: bool = True
    # TF 2.21's in-process profiler ignores tracer levels; recorded so nobody trusts them blindly.
    options_applied: bool = True
    # With the look-back trace: how long before the capture was asked for its trace began.
    lookback_ms: int = 0
    cost: CaptureCost | None = None  # what the trace cost the job (capture/cost.py)


class SnapshotError(BaseModel):
    # A code this version does not know (a newer sidecar's snapshot, read from a shared bucket)
    # stays a string rather than failing the whole snapshot.
    code: SnapshotErrorCode | str = Field(union_mode="left_to_right")
    detail: str


class SnapshotFile(BaseModel):
    name: str
    size_bytes: int


class CaptureSource(BaseModel):
    """Which process answered for one capture file (capture/answered_by.py): the host name its
    profiler wrote into it, and the processes seen listening at its address (several where
    SO_REUSEPORT shares a port; none where the service cannot see the job's processes)."""

    file: str
    address: str | None = None  # the worker's host:port (a sidecar's capture)
    hostname: str | None = None  # XSpace.hostnames: the machine or pod of the process
    pids: list[int] = Field(default_factory=list)
    note: str | None = None  # why the pids are not one, where they are not


class SnapshotHead(BaseModel):
    """What a snapshot is without what its analysis found: who took it, when, how, its files, its
    end. `GET /profiles` lists these (api/schemas.py); the whole `Snapshot` is one read away."""

    id: str
    status: SnapshotStatus = SnapshotStatus.CAPTURING
    target: str
    # Which sidecar took it (PROFILER_POD_NAME / PROFILER_POD_NAMESPACE): the fleet hub's filters.
    pod: str | None = None
    namespace: str | None = None
    # Which job (PROFILER_WORKLOAD: the chart's release, or the pod's owner): a job is its
    # workload, not its target's name (every chart release names its target `trainer`).
    workload: str | None = None
    workers: list[str] = Field(default_factory=list)
    trigger: Trigger = Field(default_factory=Trigger)
    capture: CaptureOptions
    created_at: datetime = Field(default_factory=utcnow)
    capture_started_at: datetime | None = None
    capture_finished_at: datetime | None = None
    finished_at: datetime | None = None
    pinned: bool = False
    files: list[SnapshotFile] = Field(default_factory=list)
    sources: list[CaptureSource] = Field(default_factory=list)  # which process answered
    error: SnapshotError | None = None
    # The release that took it (CHANGELOG.md); None: a release before 0.2.0.
    service_version: str | None = None

    @computed_field
    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @computed_field
    @property
    def hosts(self) -> list[str]:
        return [
            f.name.removesuffix(".xplane.pb") for f in self.files if f.name.endswith(".xplane.pb")
        ]


class Snapshot(SnapshotHead):
    """One capture from trigger to findings; stored as `snapshot.json` beside the capture files."""

    summary: Summary | None = None
    findings: list[Finding] = Field(default_factory=list)
    # The job's previous ready snapshot (the same namespace, workload and target), and what
    # became of the findings of its last one that raised any (across/verification.py).
    previous_id: str | None = None
    verified_against: str | None = None
    verification: list[Verification] = Field(default_factory=list)
    step_change: StepChange | None = None  # against `verified_against`
    # The minutes before the capture and the capture itself: the service's own samples and,
    # when configured, Prometheus's series.
    lead_up: LeadUp | None = None
