"""The hub's parts wired together, and the bucket's sync into the fleet index.

The fleet index is the sidecar's own store (`SnapshotStore` + its `BucketCatalogue` and
`BucketReader`, no upload queue) with nothing local:
every snapshot is a `remote` entry of `PROFILER_STORE`/index.sqlite, read from the bucket. One
thread syncs it every `hub_sync_interval_s`: it lists the bucket, reads only the `snapshot.json`
files that are new or rewritten (their ETag changed; many at once from the sidecars' manifests),
drops the ones deleted, and reads the sidecars' registration records (`sidecars/`) and baselines
(`baselines/`). Requests never wait on the bucket; delete the index and the next start rebuilds
it from the bucket. Replicas: each keeps its own index of the same
bucket, and shares its registry with the others through it (`peers.py`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from profiler_service.config import HubSettings
from profiler_service.hub.ledger_book import LedgerBook
from profiler_service.hub.metrics import FleetCollector, FleetMetrics
from profiler_service.hub.peers import RegistryShare, replica_name
from profiler_service.hub.registration import RECORDS_PREFIX
from profiler_service.hub.registry import SidecarRecord, SidecarRegistry
from profiler_service.hub.routing import FleetRouter
from profiler_service.lifecycle import BackgroundLoop, Lifecycle, LoopHealth
from profiler_service.store import SnapshotStore
from profiler_service.store.baselines import FleetBaselines
from profiler_service.store.bucket_catalogue import BucketCatalogue, RefreshStats
from profiler_service.store.bucket_client import BucketClient
from profiler_service.store.bucket_reader import catalogued_store
from profiler_service.targets import Target
from profiler_service.tenancy import TenantTokens
from profiler_service.trigger.alert_log import AlertLog

__all__ = ["FleetSync", "HubService", "build_hub"]

log = logging.getLogger(__name__)


class FleetSync:
    """The bucket -> fleet index (and registration records -> registry) loop."""

    def __init__(self, catalogue: BucketCatalogue, registry: SidecarRegistry, interval_s: float):
        self.catalogue = catalogue
        self.bucket = catalogue.bucket
        self.registry = registry
        self.baselines = FleetBaselines(self.bucket)
        self.interval_s = interval_s
        self.syncs_total = 0
        self.failures_total = 0
        self.changes_total = 0  # syncs that indexed or dropped a snapshot
        self.last: RefreshStats | None = None
        self.last_success_s: float | None = None
        self.first_done = threading.Event()
        self._loop = BackgroundLoop("fleet-sync", self._round, join_s=30)

    def once(self) -> RefreshStats | None:
        stats = self.catalogue.refresh(force=True)
        self.syncs_total += 1
        if stats is None:
            self.failures_total += 1
        else:
            self.last, self.last_success_s = stats, time.time()
            if stats.indexed or stats.removed:
                self.changes_total += 1
            log.info(
                "fleet sync: %d snapshots listed, %d indexed, %d dropped in %.2f s "
                "(listing %.2f s, reading %.2f s; %d from %d manifests)",
                stats.listed, stats.indexed, stats.removed, stats.duration_s,
                stats.listed_s, stats.read_s, stats.from_manifests, stats.manifests,
            )  # fmt: skip
        self.read_registrations()
        self.read_baselines()
        self.first_done.set()
        return stats

    @property
    def baseline_ids(self) -> frozenset[str]:
        """The baselines the sidecars set (store/baselines.py)."""
        return self.baselines.ids

    def read_baselines(self) -> None:
        try:
            self.baselines.refresh()
        except Exception as exc:
            log.warning("could not read the baselines from %s: %s", self.bucket.url, exc)

    def read_registrations(self) -> None:
        """Registration records sidecars wrote into the bucket (hub_register_in_bucket)."""
        try:
            docs = self.bucket.read_records(RECORDS_PREFIX)
        except Exception as exc:
            log.warning("could not read sidecar records from %s: %s", self.bucket.url, exc)
            return
        for path, data in docs.items():
            try:
                record = SidecarRecord.model_validate_json(data)
                seen = record.last_seen.timestamp() if record.last_seen else 0.0
                self.registry.heartbeat(record.model_copy(update={"via": "bucket"}), seen)
            except ValueError as exc:
                log.warning("skipping sidecar record %s: %s", path, exc)

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout_s: float | None = None) -> None:
        self._loop.stop(timeout_s)

    @property
    def loops(self) -> tuple[BackgroundLoop, ...]:
        return (self._loop,)

    def _round(self) -> float:
        self.once()
        return self.interval_s


@dataclass
class HubService:
    """The hub's parts. It is the hub app's `AppCore` (api/core.py) too: the shared routes read
    snapshots from `store` (the fleet index), `/metrics` from `metrics`, and the webhook
    receiver hands alerts to `alerts`, the router."""

    settings: HubSettings
    store: SnapshotStore
    registry: SidecarRegistry
    router: FleetRouter
    fleet_sync: FleetSync
    metrics: FleetMetrics
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # the index, the log: closed last
    tenants: TenantTokens | None = None  # tokens_file: tokens that reach some namespaces
    peers: RegistryShare | None = None  # the other replicas' registries, through the bucket
    ledger: LedgerBook | None = None  # GPU-hours by job and cause (ledger.py)

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
        """The registry share, the fleet sync, the ledger (build_hub starts nothing)."""
        self.lifecycle.start([self.peers, self.fleet_sync, self.ledger])

    def stop(self) -> None:
        """The fleet sync, the registry share, then the alert log and the index."""
        self.lifecycle.stop()


def build_hub(settings: HubSettings) -> HubService:
    """Open the fleet index (rebuilt from the bucket when it is missing) and the registry."""
    storage = settings.storage
    if not storage.store_url:
        raise ValueError("the hub reads the fleet's bucket: set PROFILER_STORE_URL")
    bucket = BucketClient(storage.store_url, storage.store_options_dict())
    # Requests never refresh (math.inf): the fleet sync's thread does, every
    # hub_sync_interval_s; the catalogue's own is not started. The hub uploads nothing.
    store, catalogue = catalogued_store(storage.store, bucket, refresh_interval_s=math.inf)
    lifecycle = Lifecycle()
    store.open()
    lifecycle.closing(store.close)
    registry = SidecarRegistry(settings.fleet.sidecar_ttl_s)
    alert_log = AlertLog(store.root / "webhooks" / "alerts.jsonl").open()
    lifecycle.closing(alert_log.close)
    router = FleetRouter(settings, registry, alert_log)
    fleet_sync = FleetSync(catalogue, registry, settings.fleet.sync_interval_s)
    ledger = LedgerBook(
        store.fleet,
        settings.ledger,
        link=_report_link(settings),
        version=lambda: fleet_sync.changes_total,
    )
    collector = FleetCollector(
        settings.report, store.fleet, registry, alert_log, fleet_sync, ledger
    )
    tokens_file = settings.fleet.tokens_file
    tenants = TenantTokens(tokens_file) if tokens_file else None
    metrics = FleetMetrics(collector, loops=lifecycle.loop_health)
    peers = RegistryShare(bucket, registry, replica_name())
    return HubService(
        settings, store, registry, router, fleet_sync, metrics, lifecycle, tenants, peers, ledger
    )


def _report_link(settings: HubSettings) -> Callable[[str], str]:
    """A snapshot's report page on this hub (absolute under `public_url` when it is set)."""
    base = (settings.report.public_url or "").rstrip("/")
    return lambda snapshot_id: f"{base}/profiles/{quote(snapshot_id)}/report"
