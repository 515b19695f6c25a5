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
    """Every setting has a safe default and a description; docs/reference/configuration.md is
    generated from them (`scripts/gen-docs`)."""

    model_config = SettingsConfigDict(env_prefix="PROFILER_", extra="ignore")

    host: str = Field(
        default="127.0.0.1",
        description="Bind address; a non-loopback one needs an API token or `insecure`.",
    )
    port: int = Field(default=8080, ge=0, le=65535, description="HTTP port.")
    insecure: bool = Field(
        default=False,
        description="Allow a non-loopback bind without an API token.",
    )
    api_token: SecretStr | None = Field(
        default=None,
        description="When set, `POST`/`PUT`/`DELETE` need `Authorization: Bearer <token>`.",
    )

    store: Path = Field(
        default=Path("./profiles"),
        description="Snapshot store directory: the volume shared with the job.",
    )
    store_url: str | None = Field(
        default=None,
        description="fsspec URL every finished snapshot is mirrored to and other sidecars' "
        "snapshots are listed from (`s3://bucket/prefix`, `gs://...`, `file:///...`).",
    )
    store_options: SecretStr | None = Field(
        default=None,
        description="fsspec storage options for `store_url`, a JSON object "
        '(`{"endpoint_url": ..., "key": ..., "secret": ...}`); a secret, never logged.',
    )
    store_refresh_s: float = Field(
        default=10.0, ge=0, description="`GET /profiles` lists the bucket at most this often."
    )
    store_retry_max_s: float = Field(
        default=300.0, gt=0, description="Longest wait between retries of a failed upload."
    )
    capture_url: str | None = Field(
        default=None,
        description="URL the job's profiler writes captures to when it shares no volume with "
        "the service (`gs://bucket/incoming`); read back with fsspec. Must lie outside "
        "`store_url`.",
    )
    targets: Annotated[list[Target], NoDecode] = Field(
        default_factory=list,
        description="What may be captured: `[NAME=]grpc://HOST:PORT[,...]`, "
        "`[NAME=]tf-config://[PATH][?tasks=...&port=N]` or `[NAME=]dns://NAME:PORT`, several "
        "separated by spaces or `;`, or a JSON list of `{name, workers}` / `{name, discover}`.",
    )

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
    capture_attempts: int = Field(
        default=2, ge=1, le=10, description="The capture client's tracing attempts."
    )
    capture_max_workers: int = Field(
        default=32,
        ge=1,
        le=1024,
        description="Most workers of a discovered target (`tf-config://`, `dns://`) captured at "
        "once: the first ones, the chief first.",
    )
    analysis_timeout_s: float = Field(
        default=300.0, gt=0, description="Analysis is stopped and failed after this."
    )
    analysis_python: Path | None = Field(
        default=None,
        description="The Python of an environment with `profiler-service[analysis]` (XProf) "
        "that runs the analysis worker: how an agent in a pinned job analyses. "
        "Unset: this process's own Python.",
    )
    analysis_max_memory_bytes: int | None = Field(
        default=None,
        gt=0,
        description="The analysis worker is stopped past this resident memory "
        "(`analysis_too_large`, the capture kept). Unset: 3/4 of what the cgroup limit "
        "(else the host's memory) leaves beside this process.",
    )
    analysis_worker_idle_s: float = Field(
        default=900.0,
        ge=0,
        description="A warm analysis worker (XProf imported; started at start-up and as each "
        "capture begins) exits after this long without an analysis. 0: each analysis starts "
        "its own worker.",
    )
    analysis_worker_max_jobs: int = Field(
        default=20,
        ge=1,
        description="A warm analysis worker is replaced after this many analyses.",
    )
    analysis_worker_recycle_bytes: int = Field(
        default=768 * 2**20,
        ge=64 * 2**20,
        description="A warm analysis worker holding more resident memory than this after an "
        "analysis is replaced: a long life must not mean a growing one.",
    )
    shutdown_grace_s: float = Field(
        default=20.0,
        ge=0,
        description="On SIGTERM, captures in flight may finish for this long (keep it under the "
        "pod's `terminationGracePeriodSeconds`); the rest are `interrupted` at the next start.",
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

    retention_max_count: int = Field(
        default=200, ge=1, description="Most snapshots kept (pinned ones are never evicted)."
    )
    retention_max_bytes: int = Field(
        default=20 * 1024**3, ge=1, description="Most bytes of snapshots kept (20 GiB)."
    )

    tensorboard_url: str | None = Field(
        default=None,
        description="Where XProf/TensorBoard serves the store (`http://xprof:8791`), for "
        "`links.tensorboard`.",
    )
    tensorboard_flavour: str = Field(
        default="xprof",
        pattern="^(xprof|tensorboard)$",
        description="`xprof` or `tensorboard` (TensorBoard's links end in `#profile`).",
    )
    public_url: str | None = Field(
        default=None,
        description="Where people reach this service (`https://profiler.example`), for the "
        "report links in Grafana annotations; unset, they are relative.",
    )

    # Alert webhooks (POST /webhooks/grafana, /webhooks/alertmanager).
    webhook_token: SecretStr | None = Field(
        default=None,
        description="Webhooks accept `Authorization: Bearer <token>`; with neither this nor "
        "basic auth set, they take `api_token`.",
    )
    webhook_username: str | None = Field(
        default=None,
        description="Webhooks accept HTTP basic auth with this and `webhook_password` (set both).",
    )
    webhook_password: SecretStr | None = Field(
        default=None, description="The basic-auth password, with `webhook_username`."
    )
    webhook_hmac_secret: SecretStr | None = Field(
        default=None,
        description="`/webhooks/grafana` requires Grafana's HMAC-SHA256 signature with this "
        "secret (it then replaces `api_token` there, not the webhook token or basic auth).",
    )
    webhook_hmac_header: str = Field(
        default="X-Grafana-Alerting-Signature",
        min_length=1,
        description="The signature's header (Grafana's UI suggests this name; set what your "
        "contact point sends).",
    )
    webhook_hmac_timestamp_header: str | None = Field(
        default=None,
        description="When set, the signature covers `timestamp:body` and the timestamp (Unix "
        "seconds) must be in this header.",
    )
    webhook_hmac_max_age_s: float = Field(
        default=300.0,
        gt=0,
        description="A signed timestamp older (or further in the future) than this is refused.",
    )
    webhook_max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="Larger webhook bodies get 413."
    )
    webhook_cooldown_s: float = Field(
        default=600.0,
        ge=0,
        description="An alert (fingerprint) captured within this is `deduplicated`.",
    )
    webhook_min_interval_s: float = Field(
        default=60.0,
        ge=0,
        description="At most one alert-triggered capture this often, over all alerts "
        "(`throttled`).",
    )
    webhook_target_rules: list[TargetRule] = Field(
        default_factory=list,
        description='JSON list of `{"label", "pattern", "target"}`: an alert whose label fully '
        "matches the regex captures that target; checked first.",
    )
    webhook_target_labels: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["profile_target", "pod", "job", "instance"],
        description="Then: the first of these labels whose value is a configured target's name "
        "(comma-separated or a JSON list).",
    )
    webhook_default_target: str | None = Field(
        default=None,
        description="Then: this target; unset, an unmatched alert is `rejected`.",
    )

    grafana_url: str | None = Field(
        default=None,
        description="With `grafana_token`, every finished capture is annotated in Grafana.",
    )
    grafana_token: SecretStr | None = Field(
        default=None,
        description="A Grafana service-account token with `annotations:create`.",
    )
    grafana_annotation_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Tries per annotation (5xx, 429 and network errors are retried, after "
        "0.5 s, 1 s, ...).",
    )
    grafana_timeout_s: float = Field(default=5.0, gt=0, description="Per request to Grafana.")

    capture_labels: dict[str, str] = Field(
        default_factory=dict,
        description='Labels (JSON object) added to every capture, e.g. `{"model_version": "v7"}`.',
    )
    schedules: list[Schedule] = Field(
        default_factory=list,
        description="Scheduled captures: JSON list of `{target, interval_s (>= 10), jitter_s, "
        "duration_s, labels}`; a schedule that finds its target busy is skipped.",
    )
    regression_max_share: float = Field(
        default=0.10,
        ge=0,
        description="Step-time growth over the baseline that counts as a regression.",
    )

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
    prometheus_url: str | None = Field(
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
    pod_name: str | None = Field(
        default=None,
        description="`$pod` in the queries (the Helm chart sets it from the downward API).",
    )
    pod_namespace: str | None = Field(default=None, description="`$namespace` in the queries.")
    lookback_trace_s: float = Field(
        default=0.0,
        ge=0,
        le=60,
        description="The look-back trace (sidecar, TF 2.21+, single-worker targets): keep the "
        "job's profiler tracing and drop the trace every this many seconds, so captures begin "
        "up to this long before their trigger; costs the job a capture's overhead all the "
        "time. 0: off.",
    )

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

    memory_watch: bool = Field(
        default=True,
        description="Capture when memory nears capacity (needs the look-back sampler).",
    )
    memory_watch_share: float = Field(
        default=0.90,
        gt=0,
        le=1,
        description="Capture when memory in use crosses this share of capacity (not for NVML's "
        "reserved GPU memory).",
    )
    memory_watch_horizon_s: float = Field(
        default=600.0,
        ge=0,
        description="Capture when the growth over the window reaches capacity within this.",
    )
    memory_watch_growth_min_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Growth counts only once this share of capacity is in use (a job filling "
        "its buffers at start-up, far from its limit, is not captured).",
    )
    memory_watch_window_s: float = Field(
        default=30.0,
        ge=3,
        description="The growth is fitted over this many seconds of samples (at least half of "
        "them present).",
    )
    memory_watch_cooldown_s: float = Field(
        default=1800.0, ge=0, description="After a watch capture, the next no sooner than this."
    )
    memory_watch_duration_s: float | None = Field(
        default=None, gt=0, description="A watch capture's length. Unset: `duration_default_s`."
    )
    memory_watch_capacity_bytes: int | None = Field(
        default=None,
        gt=0,
        description="The job's host memory limit when its cgroup's (else the host's memory) is "
        "not what kills it; the memory rules project host growth to it too.",
    )
    memory_watch_target: str | None = Field(
        default=None, description="Which target the watch captures. Unset: the first target."
    )

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
        watch = self.memory_watch_duration_s
        if watch is not None and not self.duration_min_s <= watch <= self.duration_max_s:
            raise ValueError(
                f"memory_watch_duration_s={watch} must lie within [{self.duration_min_s}, "
                f"{self.duration_max_s}]: every capture keeps the bounds, the watch's too"
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
