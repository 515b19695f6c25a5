"""The hub's parts wired together.

The fleet index (index/): tables of what lists, filters and the fleet view read, on SQLite
under `PROFILER_STORE` (one replica, the default) or on PostgreSQL (`hub_database_url`, shared
by every replica). One thread syncs it from the bucket every `hub_sync_interval_s`
(fleet_sync.py; on a shared index one replica for the fleet), listing only what was taken
since the last sync and, every `hub_full_sync_interval_s`, the whole bucket. Requests never
wait on the bucket but to read one whole snapshot (`GET /profiles/{id}`) or its files. Delete a
SQLite index and the next start rebuilds it from the bucket. Replicas share their registries
through the shared index's `sidecars` table, or, each on its own SQLite, through the bucket
(`peers.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from profiler_service.config import HubSettings
from profiler_service.hub.explain import ExplainPolicy
from profiler_service.hub.fleet_sync import FleetSync
from profiler_service.hub.index.database import FleetDatabase, database_url
from profiler_service.hub.index.reader import HubSnapshots
from profiler_service.hub.index.registry_table import RegistryTable
from profiler_service.hub.index.sync import IndexSync
from profiler_service.hub.ledger_book import LedgerBook
from profiler_service.hub.metrics import FleetCollector, FleetMetrics
from profiler_service.hub.peers import RegistryShare, replica_name
from profiler_service.hub.registry import SidecarRegistry
from profiler_service.hub.routing import FleetRouter
from profiler_service.lifecycle import Lifecycle, LoopHealth
from profiler_service.store.bucket_client import BucketClient
from profiler_service.targets import Target
from profiler_service.tenancy import TenantTokens
from profiler_service.trigger.alert_log import AlertLog

__all__ = ["FleetSync", "HubService", "build_hub"]

log = logging.getLogger(__name__)


@dataclass
class HubService:
    """The hub's parts. It is the hub app's `AppCore` (api/core.py) too: the shared routes read
    snapshots from `store` (the fleet index), `/metrics` from `metrics`, and the webhook
    receiver hands alerts to `alerts`, the router."""

    settings: HubSettings
    store: HubSnapshots
    registry: SidecarRegistry
    router: FleetRouter
    fleet_sync: FleetSync
    metrics: FleetMetrics
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # the index, the log: closed last
    tenants: TenantTokens | None = None  # tokens_file: tokens that reach some namespaces
    # the other replicas' registries: through the shared index's table, else the bucket
    peers: RegistryTable | RegistryShare | None = None
    ledger: LedgerBook | None = None  # GPU-hours by job and cause (ledger.py)
    explain: ExplainPolicy | None = None  # captures asked for its idle hours (explain.py)

    @property
    def alerts(self) -> FleetRouter:
        """Alerts are routed to the sidecars they name."""
        return self.router

    @property
    def targets(self) -> list[Target]:
        """The hub captures nothing itself."""
        return []

    def loop_health(self) -> list[LoopHealth]:
        return self.lifecycle.loop_health()

    def start(self) -> None:
        """The registry share, the fleet sync, the ledger and the captures that explain it
        (build_hub starts nothing)."""
        self.lifecycle.start([self.peers, self.fleet_sync, self.ledger, self.explain])

    def stop(self) -> None:
        """The fleet sync, the registry share, then the alert log and the index."""
        self.lifecycle.stop()


def build_hub(settings: HubSettings) -> HubService:
    """Open (and migrate) the fleet index and the registry; start nothing."""
    storage, fleet = settings.storage, settings.fleet
    if not storage.store_url:
        raise ValueError("the hub reads the fleet's bucket: set PROFILER_STORE_URL")
    bucket = BucketClient(storage.store_url, storage.store_options_dict())
    url = fleet.database_url.get_secret_value() if fleet.database_url else None
    db = FleetDatabase(database_url(url, storage.store))
    db.migrate()
    lifecycle = Lifecycle()
    lifecycle.closing(db.close)
    store = HubSnapshots(db, bucket)
    registry = SidecarRegistry(fleet.sidecar_ttl_s)
    alert_log = AlertLog(storage.store / "webhooks" / "alerts.jsonl").open()
    lifecycle.closing(alert_log.close)
    router = FleetRouter(
        fleet, settings.webhook, settings.bounds, settings.server.hub_token, registry, alert_log
    )
    index_sync = IndexSync(
        db, bucket, interval_s=fleet.sync_interval_s, full_interval_s=fleet.full_sync_interval_s
    )
    peers: RegistryTable | RegistryShare
    if db.shared:
        peers = RegistryTable(db, registry, replica_name())
        fleet_sync = FleetSync(index_sync, registry, fleet.sync_interval_s, table=peers)
    else:
        peers = RegistryShare(bucket, registry, replica_name())
        fleet_sync = FleetSync(index_sync, registry, fleet.sync_interval_s)
    ledger = LedgerBook(
        store.fleet,
        settings.ledger,
        link=_report_link(settings),
        version=lambda: fleet_sync.version,
    )
    explain = ExplainPolicy(
        settings.explain,
        settings.ledger,
        ledger,
        registry,
        router,
        index_sync.writes,
        db.lease,
        first_round_after_s=fleet.sidecar_ttl_s / 2,
    )
    collector = FleetCollector(
        settings.report, store.fleet, registry, alert_log, fleet_sync, ledger, explain
    )
    tenants = TenantTokens(fleet.tokens_file) if fleet.tokens_file else None
    metrics = FleetMetrics(collector, loops=lifecycle.loop_health)
    fleet_sync.after_round.append(metrics.prepare)
    ledger.after_round.append(metrics.prepare)
    return HubService(
        settings, store, registry, router, fleet_sync, metrics, lifecycle, tenants, peers,
        ledger, explain,
    )  # fmt: skip


def _report_link(settings: HubSettings) -> Callable[[str], str]:
    """A snapshot's report page on this hub (absolute under `public_url` when it is set)."""
    base = (settings.report.public_url or "").rstrip("/")
    return lambda snapshot_id: f"{base}/profiles/{quote(snapshot_id)}/report"
