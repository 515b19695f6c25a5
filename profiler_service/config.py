"""Service settings: one class, `PROFILER_` environment variables, CLI flags override them."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from profiler_service.targets import TARGET_NAME_PATTERN, Target, TargetRule


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


class Settings(BaseSettings):
    """Every setting has a safe default; README lists each one."""

    model_config = SettingsConfigDict(env_prefix="PROFILER_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    insecure: bool = False  # allow a non-loopback bind without an API token
    api_token: SecretStr | None = None

    store: Path = Path("./profiles")
    # Optional object store every finished snapshot is mirrored to (fsspec URL: s3://bucket/prefix,
    # gs://..., file:///...), shared by many sidecars; options are fsspec storage options (JSON),
    # secret because they may hold credentials.
    store_url: str | None = None
    store_options: SecretStr | None = None
    store_refresh_s: float = Field(default=10.0, ge=0)  # how stale a listing of the bucket may be
    store_retry_max_s: float = Field(default=300.0, gt=0)  # longest wait between upload retries
    # Where the job's profiler writes captures when it shares no volume with the service (a URL
    # the job's TensorFlow writes, e.g. gs://bucket/incoming; fsspec reads it back here).
    capture_url: str | None = None
    targets: Annotated[list[Target], NoDecode] = Field(default_factory=list)

    duration_default_s: float = Field(default=5.0, gt=0)
    duration_min_s: float = Field(default=0.1, gt=0)
    # TF traces beyond ~10 s can exhaust memory (tensorflow#61526): raise with care.
    duration_max_s: float = Field(default=60.0, gt=0)
    capture_grace_s: float = Field(default=30.0, gt=0)
    capture_attempts: int = Field(default=2, ge=1, le=10)
    # A discovered target (tf-config://, dns://) is captured on at most this many workers, the
    # first ones (the chief first): each worker's capture is tens of MB and analysed in turn.
    capture_max_workers: int = Field(default=32, ge=1, le=1024)
    analysis_timeout_s: float = Field(default=300.0, gt=0)
    # The Python that runs the analysis worker: one with `profiler-service[analysis]` (XProf). The
    # agent's own install leaves XProf out so the job keeps its pins; point this at another
    # environment's interpreter. Unset: this process's own Python.
    analysis_python: Path | None = None
    # The analysis worker is stopped past this much resident memory (`analysis_too_large`, the
    # capture kept), before the kernel's OOM killer could pick the service. Unset: 3/4 of what
    # this process's cgroup limit (else the host's memory) leaves beside this process.
    analysis_max_memory_bytes: int | None = Field(default=None, gt=0)
    # On SIGTERM, finish in-flight captures for up to this long (keep it under the pod's
    # terminationGracePeriodSeconds); what is still running then is `interrupted` at next start.
    shutdown_grace_s: float = Field(default=20.0, ge=0)

    host_tracer_level: int = Field(default=2, ge=0, le=3)
    python_tracer_level: int = Field(default=0, ge=0, le=1)
    device_tracer_level: int = Field(default=1, ge=0, le=1)
    include_dataset_ops: bool = True

    retention_max_count: int = Field(default=200, ge=1)
    retention_max_bytes: int = Field(default=20 * 1024**3, ge=1)

    # Where TensorBoard/XProf serves this store, for deep links (e.g. http://xprof:8791).
    tensorboard_url: str | None = None
    tensorboard_flavour: str = Field(default="xprof", pattern="^(xprof|tensorboard)$")
    # Where people reach this service (e.g. https://profiler.example), for links in annotations.
    public_url: str | None = None

    # Alert webhooks (POST /webhooks/grafana, /webhooks/alertmanager).
    webhook_token: SecretStr | None = None  # Bearer; falls back to api_token when unset
    webhook_username: str | None = None  # HTTP basic auth, with webhook_password
    webhook_password: SecretStr | None = None
    webhook_hmac_secret: SecretStr | None = None  # Grafana's signed webhooks
    webhook_hmac_header: str = Field(default="X-Grafana-Alerting-Signature", min_length=1)
    webhook_hmac_timestamp_header: str | None = None
    webhook_hmac_max_age_s: float = Field(default=300.0, gt=0)
    webhook_max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    webhook_cooldown_s: float = Field(default=600.0, ge=0)  # per alert fingerprint
    webhook_min_interval_s: float = Field(default=60.0, ge=0)  # between alert captures
    webhook_target_rules: list[TargetRule] = Field(default_factory=list)
    webhook_target_labels: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["profile_target", "pod", "job", "instance"]
    )
    webhook_default_target: str | None = None

    # Grafana annotations for every finished capture (a service-account token with
    # annotations:create).
    grafana_url: str | None = None
    grafana_token: SecretStr | None = None
    grafana_annotation_attempts: int = Field(default=3, ge=1, le=10)
    grafana_timeout_s: float = Field(default=5.0, gt=0)

    # History: labels on every capture (e.g. {"model_version": "v7"}), scheduled captures,
    # and the step-time growth that counts as a regression against a baseline.
    capture_labels: dict[str, str] = Field(default_factory=dict)
    schedules: list[Schedule] = Field(default_factory=list)
    regression_max_share: float = Field(default=0.10, ge=0)

    # The lead-up: a ring of per-second samples (step time, memory, RSS, GPU) kept for this long
    # and stored in every snapshot; 0 turns the sampler (and the memory watch) off.
    lookback_s: float = Field(default=300.0, ge=0, le=86400)
    lookback_interval_s: float = Field(default=1.0, ge=0.1, le=60)
    # The sidecar's job process, when the two share a PID namespace: a pid, or a regular
    # expression searched in each process's command line (the first match, lowest pid).
    watch_process: str | None = None
    # Prometheus's HTTP API: each snapshot stores these PromQL queries over its look-back window
    # ($target, $pod, $namespace and the trigger's labels are substituted, quoted for PromQL).
    prometheus_url: str | None = None
    prometheus_queries: list[PromQuery] = Field(default_factory=lambda: list(DEFAULT_PROM_QUERIES))
    prometheus_timeout_s: float = Field(default=5.0, gt=0)
    pod_name: str | None = None  # $pod in queries (the Helm chart sets it from the downward API)
    pod_namespace: str | None = None  # $namespace in queries
    # The look-back trace (TF 2.21+ jobs, sidecar, single-worker targets): the job's profiler
    # traces continuously and the sidecar drops the trace every this many seconds, so a capture
    # starts up to this long before its trigger. 0: off. It costs the job a capture's overhead
    # all the time; see README.
    lookback_trace_s: float = Field(default=0.0, ge=0, le=60)

    # The fleet hub (`profiler-service hub`, docs/fleet.md): a sidecar's registration, and the
    # hub's own sync and forwarding.
    hub_url: str | None = Field(
        default=None,
        description="The fleet hub this sidecar registers with (pod, namespace, targets, "
        "`hub_advertise_url`) every `hub_heartbeat_s`. Unset: no registration.",
    )
    hub_token: SecretStr | None = Field(
        default=None,
        description="The fleet's shared secret: sidecars send it to register, the hub sends it "
        "to sidecars, which accept it like their API and webhook tokens.",
    )
    hub_advertise_url: str | None = Field(
        default=None,
        description="The URL the hub dials this sidecar at (the chart: `http://$(POD_IP):8080`). "
        "Unset: `public_url`, else `http://127.0.0.1:<port>`.",
    )
    hub_heartbeat_s: float = Field(
        default=15.0, gt=0, description="Seconds between a sidecar's registrations."
    )
    hub_register_in_bucket: bool = Field(
        default=False,
        description="Also (without `hub_url`: only) register by writing the record into the "
        "shared bucket (`store_url`/sidecars/), where the hub reads it at each sync.",
    )
    hub_sidecar_ttl_s: float = Field(
        default=60.0, gt=0, description="The hub drops a sidecar not heard from for this long."
    )
    hub_sync_interval_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds between the hub's syncs of the bucket (`store_url`) into its fleet "
        "index.",
    )
    hub_forward_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="How long the hub waits for a sidecar it forwards an alert or a capture to.",
    )

    # The memory watch: capture before an out-of-memory kill. Fires when memory in use crosses
    # this share of capacity, or grows fast enough (over the window) to reach it within horizon.
    memory_watch: bool = True
    memory_watch_share: float = Field(default=0.90, gt=0, le=1)
    memory_watch_horizon_s: float = Field(default=600.0, ge=0)
    # Growth counts from this share of capacity on: a job filling its buffers at start-up, far
    # from its limit, is not captured (its first 30 s look like a leak).
    memory_watch_growth_min_share: float = Field(default=0.5, ge=0, le=1)
    memory_watch_window_s: float = Field(default=30.0, ge=3)
    memory_watch_cooldown_s: float = Field(default=1800.0, ge=0)
    memory_watch_duration_s: float | None = Field(default=None, gt=0)  # default: duration_default_s
    # The job's host memory limit, when its cgroup limit (else the host's memory) is not what
    # kills it; also the limit the memory rules project host growth against.
    memory_watch_capacity_bytes: int | None = Field(default=None, gt=0)
    memory_watch_target: str | None = None  # default: the first target

    @field_validator("store_url", "capture_url", "prometheus_url", "hub_url", "hub_advertise_url")
    @classmethod
    def _check_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not re.match(r"^[a-z][a-z0-9+.-]*://.", value.strip()):
            raise ValueError(
                f"{info.field_name} {value!r} must be a URL such as gs://bucket/prefix"
            )
        return value.strip().rstrip("/") if value else None

    def store_options_dict(self) -> dict[str, Any]:
        """PROFILER_STORE_OPTIONS parsed; checked here, not by a validator, whose error would
        quote the text (and so the credentials in it)."""
        if self.store_options is None:
            return {}
        try:
            parsed = json.loads(self.store_options.get_secret_value() or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"PROFILER_STORE_OPTIONS is not valid JSON ({exc.msg} at {exc.pos})"
            ) from None
        if not isinstance(parsed, dict):
            raise ValueError("PROFILER_STORE_OPTIONS must be a JSON object")
        return parsed

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
    def _check(self) -> Settings:
        if not self.duration_min_s <= self.duration_default_s <= self.duration_max_s:
            raise ValueError(
                f"duration_default_s={self.duration_default_s} must lie within "
                f"[{self.duration_min_s}, {self.duration_max_s}]"
            )
        if (
            self.capture_url
            and self.store_url
            and (f"{self.capture_url}/".startswith(f"{self.store_url}/"))
        ):
            raise ValueError(
                "capture_url must lie outside store_url: XProf would list the captures in "
                "flight there as runs"
            )
        names = [t.name for t in self.targets]
        if len(names) != len(set(names)):
            raise ValueError(f"target names must be unique, got {names}")
        self._check_webhooks(names)
        for schedule in self.schedules:
            if schedule.target not in names:
                raise ValueError(
                    f"a schedule names target {schedule.target!r}, which is not configured "
                    f"(configured: {', '.join(names) or 'none'})"
                )
            if schedule.duration_s is not None and not (
                self.duration_min_s <= schedule.duration_s <= self.duration_max_s
            ):
                raise ValueError(f"schedule of {schedule.target!r}: duration_s out of bounds")
        return self

    @field_validator("webhook_target_labels", mode="before")
    @classmethod
    def _parse_labels(cls, value: Any) -> Any:
        """Accept a JSON list or comma-separated names (`pod,job`)."""
        if isinstance(value, str):
            text = value.strip()
            return (
                json.loads(text)
                if text.startswith("[")
                else [s.strip() for s in text.split(",") if s.strip()]
            )
        return value

    def _check_webhooks(self, names: list[str]) -> None:
        if (self.webhook_username is None) != (self.webhook_password is None):
            raise ValueError("webhook_username and webhook_password go together: set both")
        if not self.checks_target_names:
            return
        wanted = [
            (f"webhook_target_rules ({r.label}~{r.pattern})", r.target)
            for r in self.webhook_target_rules
        ]
        if self.webhook_default_target is not None:
            wanted.append(("webhook_default_target", self.webhook_default_target))
        for where, target in wanted:
            if target not in names:
                raise ValueError(
                    f"{where} names target {target!r}, which is not configured "
                    f"(configured: {', '.join(names) or 'none'})"
                )

    # The hub's rules name the targets sidecars register, which no setting lists (HubSettings).
    checks_target_names: ClassVar[bool] = True

    def target(self, name: str | None) -> Target | None:
        """The named target, or the only/first one when no name is given."""
        if name is None:
            return self.targets[0] if self.targets else None
        return next((t for t in self.targets if t.name == name), None)

    @property
    def binds_loopback(self) -> bool:
        if self.host in ("localhost", ""):
            return self.host == "localhost"
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check_bind_is_safe(self) -> None:
        """Refuse to expose the API beyond loopback without a token, unless told to."""
        if not self.binds_loopback and self.api_token is None and not self.insecure:
            raise ValueError(
                f"refusing to listen on {self.host} without PROFILER_API_TOKEN; "
                "set a token, bind 127.0.0.1, or pass --insecure"
            )


class HubSettings(Settings):
    """The hub's: the same variables; its alert rules name the targets the sidecars register."""

    checks_target_names: ClassVar[bool] = False
