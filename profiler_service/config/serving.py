"""The serving side's settings groups: the HTTP server and its credentials, the store and its
bucket, links and reports, alert webhooks, Grafana, the fleet hub."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from profiler_service.config.base import Group, check_url
from profiler_service.targets import TargetRule


class ServerSettings(Group):
    """Where the HTTP API listens, the credentials it accepts, how it shuts down."""

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
    hub_token: SecretStr | None = Field(
        default=None,
        description="The fleet's shared secret: sidecars send it to register, the hub sends it "
        "to sidecars, which accept it like their API and webhook tokens.",
    )
    shutdown_grace_s: float = Field(
        default=20.0,
        ge=0,
        description="On SIGTERM, captures in flight may finish for this long (keep it under the "
        "pod's `terminationGracePeriodSeconds`); the rest are `interrupted` at the next start.",
    )

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


class StoreSettings(Group):
    """Where the snapshot store is and the bucket it is mirrored to: the hub's (its fleet index,
    the fleet's bucket); a sidecar's adds what it keeps (`SnapshotStoreSettings`)."""

    store: Path = Field(
        default=Path("./profiles"),
        description="Snapshot store directory: the volume shared with the job.",
    )
    store_url: Annotated[str | None, AfterValidator(check_url)] = Field(
        default=None,
        description="fsspec URL every finished snapshot is mirrored to and other sidecars' "
        "snapshots are listed from (`s3://bucket/prefix`, `gs://...`, `file:///...`).",
    )
    store_options: SecretStr | None = Field(
        default=None,
        description="fsspec storage options for `store_url`, a JSON object "
        '(`{"endpoint_url": ..., "key": ..., "secret": ...}`); a secret, never logged.',
    )

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


class SnapshotStoreSettings(StoreSettings):
    """The snapshot store, its retention, and the bucket it is mirrored to. The hub's store
    (`StoreSettings`) keeps what the bucket holds and lists it every `hub_sync_interval_s`:
    it reads neither the retention nor the bucket copy's pace."""

    store_refresh_s: float = Field(
        default=10.0, ge=0, description="`GET /profiles` lists the bucket at most this often."
    )
    store_retry_max_s: float = Field(
        default=300.0, gt=0, description="Longest wait between retries of a failed upload."
    )
    retention_max_count: int = Field(
        default=200, ge=1, description="Most snapshots kept (pinned ones are never evicted)."
    )
    retention_max_bytes: int = Field(
        default=20 * 1024**3, ge=1, description="Most bytes of snapshots kept (20 GiB)."
    )


class ReportSettings(Group):
    """What links, reports and comparisons show: where XProf and this service are reached, when
    a step-time change is a regression."""

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
    regression_max_share: float = Field(
        default=0.10,
        ge=0,
        description="Step-time growth over the baseline that counts as a regression.",
    )


class WebhookSettings(Group):
    """Alert webhooks (`POST /webhooks/grafana`, `/webhooks/alertmanager`): who may post, and
    which alert captures what (`trigger/alerts.py`, `hub/routing.py`): the hub's; a sidecar's
    adds when (`AlertSettings`)."""

    prefix: ClassVar[str] = "webhook_"

    token: SecretStr | None = Field(
        default=None,
        description="Webhooks accept `Authorization: Bearer <token>`; with neither this nor "
        "basic auth set, they take `api_token`.",
    )
    username: str | None = Field(
        default=None,
        description="Webhooks accept HTTP basic auth with this and `webhook_password` (set both).",
    )
    password: SecretStr | None = Field(
        default=None, description="The basic-auth password, with `webhook_username`."
    )
    hmac_secret: SecretStr | None = Field(
        default=None,
        description="`/webhooks/grafana` requires Grafana's HMAC-SHA256 signature with this "
        "secret (it then replaces `api_token` there, not the webhook token or basic auth).",
    )
    hmac_header: str = Field(
        default="X-Grafana-Alerting-Signature",
        min_length=1,
        description="The signature's header (Grafana's UI suggests this name; set what your "
        "contact point sends).",
    )
    hmac_timestamp_header: str | None = Field(
        default=None,
        description="When set, the signature covers `timestamp:body` and the timestamp (Unix "
        "seconds) must be in this header.",
    )
    hmac_max_age_s: float = Field(
        default=300.0,
        gt=0,
        description="A signed timestamp older (or further in the future) than this is refused.",
    )
    max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="Larger webhook bodies get 413."
    )
    target_rules: list[TargetRule] = Field(
        default_factory=list,
        description='JSON list of `{"label", "pattern", "target"}`: an alert whose label fully '
        "matches the regex captures that target; checked first.",
    )
    target_labels: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["profile_target", "pod", "job", "instance"],
        description="Then: the first of these labels whose value is a configured target's name "
        "(comma-separated or a JSON list).",
    )
    default_target: str | None = Field(
        default=None,
        description="Then: this target; unset, an unmatched alert is `rejected`.",
    )

    @field_validator("target_labels", mode="before")
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

    @model_validator(mode="after")
    def _check(self) -> WebhookSettings:
        if (self.username is None) != (self.password is None):
            raise ValueError("webhook_username and webhook_password go together: set both")
        return self

    def named_targets(self) -> list[tuple[str, str]]:
        """(where, target) for each target the alert rules name, for a root to check."""
        wanted = [
            (f"webhook_target_rules ({r.label}~{r.pattern})", r.target) for r in self.target_rules
        ]
        if self.default_target is not None:
            wanted.append(("webhook_default_target", self.default_target))
        return wanted


class AlertSettings(WebhookSettings):
    """Alert webhooks (`POST /webhooks/grafana`, `/webhooks/alertmanager`): who may post, and
    which alert captures what, when (`trigger/alerts.py`, `hub/routing.py`). The hub's
    (`WebhookSettings`) leaves out the when: the sidecar it routes an alert to applies its own
    cooldown and throttle."""

    cooldown_s: float = Field(
        default=600.0,
        ge=0,
        description="An alert (fingerprint) captured within this is `deduplicated`.",
    )
    min_interval_s: float = Field(
        default=60.0,
        ge=0,
        description="At most one alert-triggered capture this often, over all alerts "
        "(`throttled`).",
    )


class GrafanaSettings(Group):
    """Grafana annotations of every finished capture (`exporters/grafana.py`)."""

    prefix: ClassVar[str] = "grafana_"

    url: str | None = Field(
        default=None,
        description="With `grafana_token`, every finished capture is annotated in Grafana.",
    )
    token: SecretStr | None = Field(
        default=None,
        description="A Grafana service-account token with `annotations:create`.",
    )
    annotation_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Tries per annotation (5xx, 429 and network errors are retried, after "
        "0.5 s, 1 s, ...).",
    )
    timeout_s: float = Field(default=5.0, gt=0, description="Per request to Grafana.")


class RegistrationSettings(Group):
    """A sidecar's registration with the fleet hub (`hub/registration.py`, docs/fleet.md)."""

    prefix: ClassVar[str] = "hub_"

    url: Annotated[str | None, AfterValidator(check_url)] = Field(
        default=None,
        description="The fleet hub this sidecar registers with (pod, namespace, targets, "
        "`hub_advertise_url`) every `hub_heartbeat_s`. Unset: no registration.",
    )
    advertise_url: Annotated[str | None, AfterValidator(check_url)] = Field(
        default=None,
        description="The URL the hub dials this sidecar at (the chart: `http://$(POD_IP):8080`). "
        "Unset: `public_url`, else `http://127.0.0.1:<port>`.",
    )
    heartbeat_s: float = Field(
        default=15.0, gt=0, description="Seconds between a sidecar's registrations."
    )
    register_in_bucket: bool = Field(
        default=False,
        description="Also (without `hub_url`: only) register by writing the record into the "
        "shared bucket (`store_url`/sidecars/), where the hub reads it at each sync.",
    )


class FleetSettings(Group):
    """The hub's own (`profiler-service hub`): its registry, its syncs of the bucket, its
    forwarding to sidecars."""

    prefix: ClassVar[str] = "hub_"

    sidecar_ttl_s: float = Field(
        default=60.0, gt=0, description="The hub drops a sidecar not heard from for this long."
    )
    sync_interval_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds between the hub's syncs of the bucket (`store_url`) into its fleet "
        "index (with `hub_database_url`, one replica syncs for the fleet).",
    )
    full_sync_interval_s: float = Field(
        default=3600.0,
        gt=0,
        description="Seconds between the syncs that list the whole bucket (the others list what "
        "was taken since the last): they find deletions, rewrites of older snapshots and "
        "snapshots that reached the bucket over 15 minutes late.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="The fleet index on PostgreSQL (`postgresql://user:password@host:5432/db`), "
        "shared by every replica: the bucket is synced once for the fleet and a replica starts "
        "without reading it. Unset: SQLite under `store`, one index per replica.",
    )
    forward_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="How long the hub waits for a sidecar it forwards an alert or a capture to.",
    )
    tokens_file: Path | None = Field(
        default=None,
        validation_alias="tokens_file",
        description="Tenants: a JSON file of tokens, each reading and/or capturing only some "
        "namespaces (`*`: all); re-read when it changes, no restart (a Secret mounted as a "
        "file). With it, reading and capturing need a token. Format: docs/fleet.md, Tenants.",
    )

    @model_validator(mode="after")
    def _check_tokens_file(self) -> FleetSettings:
        """A tokens file that cannot be read or is invalid fails the start."""
        if self.tokens_file is not None:
            from profiler_service.tenancy import load_token_file

            load_token_file(self.tokens_file)
        return self


def _parse_prices(value: Any) -> Any:
    """`A100=2.9,H100=4.5,*=2` (or a JSON object) -> {"A100": 2.9, "H100": 4.5, "*": 2.0}."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            return json.loads(text)
        prices = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            model, sep, price = item.partition("=")
            if not sep or not model.strip():
                raise ValueError(f"{item!r} is not MODEL=PRICE (e.g. A100=2.9,*=2)")
            prices[model.strip()] = price.strip()
        return prices
    return value


class LedgerSettings(Group):
    """The hub's fleet ledger (hub/ledger.py): where GPU-hours are counted, what they cost."""

    prefix: ClassVar[str] = "hub_"

    prometheus_url: Annotated[str | None, AfterValidator(check_url)] = Field(
        default=None,
        description="The Prometheus holding every job's GPU utilisation (`hub_gpu_util_query`). "
        "Unset: the ledger is built from the captures alone (shares, no hours) and says so.",
    )
    gpu_util_query: str = Field(
        default="DCGM_FI_DEV_GPU_UTIL",
        pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?$",
        description="A series selector, one series per GPU while a pod holds it: NVIDIA's DCGM "
        "exporter's `DCGM_FI_DEV_GPU_UTIL` (0-100), or this project's "
        "`profiler_gpu_utilization_ratio` (0-1, set `hub_gpu_util_max=1`). Matchers narrow it, "
        'e.g. `DCGM_FI_DEV_GPU_UTIL{namespace!=""}`.',
    )
    gpu_util_max: float = Field(
        default=100.0, gt=0, description="The query's value for a GPU busy all the time."
    )
    gpu_namespace_label: str = Field(
        default="namespace", description="The query's label naming the pod's namespace."
    )
    gpu_pod_label: str = Field(
        default="pod",
        description="The query's label naming the pod holding the GPU; a pod is its sidecar's "
        "`workload` where a snapshot or registration says so, else its name less the suffix "
        "its controller added.",
    )
    gpu_model_label: str = Field(
        default="modelName",
        description="The query's label naming the GPU model (`modelName` for DCGM, "
        "`model_name` for this project's exporter).",
    )
    ledger_resolution_s: float = Field(
        default=60.0,
        ge=1,
        description="Where the GPU series are scraped at different intervals, a GPU is "
        "counted held in each interval this long (at least the longest scrape interval seen) "
        "holding one of its samples.",
    )
    gpu_scrape_interval_s: float | None = Field(
        default=None,
        gt=0,
        description="The query's scrape interval: held hours are its samples x this. Unset: "
        "read from the samples (a pod's fullest hour), and where the series' intervals differ, "
        "held hours are counted by `hub_ledger_resolution_s` intervals instead (about five "
        "times the cost to Prometheus).",
    )
    ledger_bucket_s: float = Field(
        default=3600.0,
        ge=60,
        description="The ledger splits every job's hours into buckets this long, each explained "
        "by the job's nearest capture.",
    )
    ledger_capture_horizon_s: float = Field(
        default=86400.0,
        gt=0,
        description="A capture explains its job's hours up to this far from it; hours farther "
        "from every capture are `no_capture`.",
    )
    gpu_hour_prices: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict,
        description="The price of a GPU-hour by model, `A100=2.9,H100=4.5,*=2`: a key matches a "
        "model name containing it (case aside; the longest match wins), `*` any other. A model "
        "no key prices has no cost in the ledger.",
    )
    ledger_metric_window_s: float = Field(
        default=86400.0,
        gt=0,
        description="`profiler_fleet_gpu_hours` covers this window, ending at its refresh.",
    )
    ledger_refresh_s: float = Field(
        default=300.0,
        gt=0,
        description="The ledger behind the metric and the fleet page is rebuilt this often.",
    )
    prometheus_timeout_s: float = Field(
        default=30.0, gt=0, description="For the ledger's Prometheus queries together."
    )

    @field_validator("gpu_hour_prices", mode="before")
    @classmethod
    def _prices(cls, value: Any) -> Any:
        return _parse_prices(value)

    @field_validator("gpu_hour_prices")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        if any(price < 0 for price in value.values()):
            raise ValueError("GPU-hour prices cannot be negative")
        return value
