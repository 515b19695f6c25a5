"""The fleet hub's settings groups: a sidecar's registration with it, the hub's own (its
registry, its index and syncs, its forwarding), its GPU-hours ledger, and the captures it asks
for to explain the ledger's idle hours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from profiler_service.config.base import Group, check_url


class RegistrationSettings(Group):
    """A sidecar's registration with the fleet hub (`registration.py`, docs/fleet.md)."""

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
        description="Where the GPU series are scraped at different intervals, a pod seen in "
        "too few of the ledger's buckets to read its own interval is counted held in each "
        "interval this long (at least the longest scrape interval seen) holding one of its "
        "samples.",
    )
    gpu_scrape_interval_s: float | None = Field(
        default=None,
        gt=0,
        description="The query's scrape interval: held hours are its samples x this. Unset: "
        "read from the samples (a pod's fullest hour); where the series' intervals differ, "
        "each pod's samples count at its own interval, and a pod seen too briefly to read it "
        "by `hub_ledger_resolution_s` intervals.",
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
    gpu_hour_currency: str = Field(
        default="USD",
        pattern=r"^\S{1,12}$",
        description="The currency of `hub_gpu_hour_prices` (an ISO 4217 code such as USD or "
        "EUR), shown with every cost: the fleet page, `profiler-service ledger`, the ledger's "
        "JSON (`currency`).",
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


class ExplainSettings(Group):
    """The hub's captures for the ledger's unexplained idle hours (hub/explain.py): off unless
    `hub_explain_idle`; it asks the sidecars, which keep their own bounds."""

    prefix: ClassVar[str] = "hub_explain_"

    enabled: bool = Field(
        default=False,
        validation_alias="hub_explain_idle",
        description="Ask the sidecars of the jobs with the most `no_capture` idle GPU-hours (over "
        "the last `hub_ledger_capture_horizon_s`) for a capture, most first: at most "
        "`hub_explain_captures_per_h` an hour, each job once per horizon, through the sidecar's "
        "webhook (its cooldown, minimum interval and one capture at a time apply: a busy one is "
        "asked again later). Needs `hub_prometheus_url`. Off: the fleet page only says which "
        "jobs it would ask.",
    )
    captures_per_h: int = Field(
        default=6,
        ge=1,
        description="The captures the hub may start for the ledger in any hour (the fleet's, "
        "not each sidecar's).",
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        description="How long each of those captures traces (the alert's `profile_duration`, "
        "within the sidecar's bounds). Unset: the sidecar's `duration_default_s`.",
    )
