"""The serving side's settings groups: the HTTP server and its credentials, the store and its
bucket, links and reports, alert webhooks, Grafana (the fleet hub's own: hub.py)."""

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
    def local_url(self) -> str:
        """Where a process on this host reaches the API (a wildcard bind answers on loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

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


class StorageSettings(Group):
    """Where the snapshot store is and the bucket it is mirrored to: the hub's (its fleet index,
    the fleet's bucket); a sidecar's adds what it keeps (`SidecarStorageSettings`)."""

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


class SidecarStorageSettings(StorageSettings):
    """The snapshot store, its retention, and the bucket it is mirrored to. The hub's store
    (`StorageSettings`) keeps what the bucket holds and lists it every `hub_sync_interval_s`:
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
    adds when (`SidecarWebhookSettings`)."""

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


class SidecarWebhookSettings(WebhookSettings):
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
