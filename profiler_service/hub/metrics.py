"""`profiler_fleet_*`: the fleet as Prometheus sees it, built at scrape time from the index.

    profiler_fleet_sidecars{namespace}                               live registered sidecars
    profiler_fleet_snapshots{namespace,status}                       snapshots in the bucket
    profiler_fleet_step_time_seconds{namespace,workload,target}      latest ready snapshot's
    profiler_fleet_step_time_ratio{namespace,workload,target}        latest / baseline (views.py)
    profiler_fleet_regression{namespace,workload,target}             1 past regression_max_share
    profiler_fleet_findings_total{namespace,workload,target,rule,severity}
        snapshots with the finding; its OpenMetrics exemplar is the newest such snapshot_id
    profiler_fleet_latest_finding{namespace,workload,target,rule,severity,snapshot_id}
        1 for each finding of each job's latest ready snapshot (its id, for Grafana links)
    profiler_fleet_gpu_hours{namespace,workload,state,cause}         the ledger (ledger.py)
    profiler_fleet_gpu_cost{namespace,workload,state}                its hours at their prices
    profiler_fleet_alerts_total{source,outcome}                      webhook alerts routed
    profiler_fleet_explain_asks_total{outcome}                       captures asked for the
        ledger's unexplained idle hours (explain.py), by the sidecar's answer
    profiler_fleet_sync_duration_seconds, profiler_fleet_sync_timestamp_seconds,
    profiler_fleet_syncs_total, profiler_fleet_sync_failures_total   the bucket's sync

Over the last `DEFAULT_DAYS` of ready snapshots, like the fleet page. The families of a fleet
view (its jobs' series) and of the ledger are built once per view and ledger, and encoded once
per format: a scrape encodes only the small families around them (the sidecars, the syncs...).
At 4,187 jobs a scrape built and encoded 27,570 series every time, 0.5-0.7 s in the text format
(1.2 s in OpenMetrics), 85 % of it prometheus_client's encoding; reused, 4-7 ms. After each
round of the sync and of the ledger, `FleetMetrics.prepare` builds and encodes what changed in
the formats scraped before, so a scrape seldom waits for it (bench/bench_hub_database.py). A
job is its `workload`
(views.py; empty for snapshots that name none), not `job`: Prometheus keeps that label for the
scrape job and would rename ours `exported_job`.

A tenant's scrape (a token of the tokens file) gets the series of its namespaces only, and the
series that name no namespace, which are the hub's own (its syncs, its alert outcomes counted by
source and outcome, its asks by outcome): they carry no tenant's namespace, job, snapshot or
alert labels.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.samples import Exemplar

from profiler_service.config import ReportSettings
from profiler_service.exporters.loop_collector import LoopCollector
from profiler_service.hub.explain import ExplainPolicy
from profiler_service.hub.index.fleet_queries import FleetQueries
from profiler_service.hub.ledger import Ledger
from profiler_service.hub.ledger_book import LedgerBook
from profiler_service.hub.registry import SidecarRegistry
from profiler_service.hub.views import FleetView, FleetViewCache
from profiler_service.lifecycle import LoopHealth
from profiler_service.store.bucket_catalogue import RefreshStats
from profiler_service.tenancy import EVERYWHERE, Reach
from profiler_service.trigger.alert_log import AlertLog

__all__ = ["FleetCollector", "FleetMetrics", "SyncState"]

log = logging.getLogger(__name__)


class SyncState(Protocol):
    """What the collector reads of the bucket's sync (fleet.FleetSync)."""

    syncs_total: int
    failures_total: int
    last: RefreshStats | None
    last_success_s: float | None
    baseline_ids: frozenset[str]
    version: str  # changes whenever a sync (any replica's) changed the index


class FleetCollector:
    def __init__(
        self,
        settings: ReportSettings,
        index: FleetQueries,
        registry: SidecarRegistry,
        alert_log: AlertLog,
        fleet_sync: SyncState,
        ledger: LedgerBook | None = None,
        explain: ExplainPolicy | None = None,
    ):
        self.settings, self.index, self.registry = settings, index, registry
        self.alert_log, self.fleet_sync, self.ledger = alert_log, fleet_sync, ledger
        self.explain = explain
        self.views = FleetViewCache(index, settings, lambda: fleet_sync.baseline_ids)
        self._lock = threading.Lock()
        # The families last built, with the view or ledger they were built from: a scrape
        # yields the same objects until that changes (FleetMetrics encodes each once).
        self._of_view: tuple[object, list[Metric]] = (None, [])
        self._of_ledger: tuple[object, list[Metric]] = (None, [])

    def view(self) -> FleetView:
        """The fleet view as of the last sync (what the page and each scrape read)."""
        return self.views.get(self.fleet_sync.version)

    def collect(self) -> Iterator[Metric]:
        yield self._sidecars()
        yield self._snapshots()
        yield from self._view_families(self.view())
        yield from self._ledger_families()
        yield self._alerts()
        yield from self._explain_asks()
        yield from self._sync()

    def _sidecars(self) -> Metric:
        sidecars = GaugeMetricFamily(
            "profiler_fleet_sidecars", "Live registered sidecars.", labels=["namespace"]
        )
        per_ns: dict[str, int] = {}
        for s in self.registry.live():
            per_ns[s.namespace or ""] = per_ns.get(s.namespace or "", 0) + 1
        for ns, n in sorted(per_ns.items()):
            sidecars.add_metric([ns], n)
        return sidecars

    def _snapshots(self) -> Metric:
        snapshots = GaugeMetricFamily(
            "profiler_fleet_snapshots",
            "Snapshots in the fleet's bucket, by namespace and status.",
            labels=["namespace", "status"],
        )
        for ns, status, n in self.index.count_by_status():
            snapshots.add_metric([ns or "", status], n)
        return snapshots

    def _view_families(self, view: FleetView) -> list[Metric]:
        with self._lock:
            built, families = self._of_view
            if built is not view:
                families = [*self._latest(view), self._findings(view)]
                self._of_view = (view, families)
            return families

    def _ledger_families(self) -> list[Metric]:
        book = self.ledger
        ledger = book.latest(book.settings.ledger_metric_window_s) if book else None
        with self._lock:
            built, families = self._of_ledger
            if built is not ledger or not families:
                families = list(self._ledger(ledger))
                self._of_ledger = (ledger, families)
            return families

    def _latest(self, view: FleetView) -> Iterator[Metric]:
        """Each job's latest ready snapshot: its step time, against the baseline's, its
        findings."""
        step = GaugeMetricFamily(
            "profiler_fleet_step_time_seconds",
            "Mean step time of each job's latest ready snapshot.",
            labels=["namespace", "workload", "target"],
        )
        ratio = GaugeMetricFamily(
            "profiler_fleet_step_time_ratio",
            "Latest step time over the baseline's (its newest pinned snapshot, else the oldest "
            "of the window).",
            labels=["namespace", "workload", "target"],
        )
        regression = GaugeMetricFamily(
            "profiler_fleet_regression",
            "1 when the latest step time exceeds the baseline's by more than "
            "PROFILER_REGRESSION_MAX_SHARE.",
            labels=["namespace", "workload", "target"],
        )
        latest = GaugeMetricFamily(
            "profiler_fleet_latest_finding",
            "1 for each finding of each job's latest ready snapshot.",
            labels=["namespace", "workload", "target", "rule", "severity", "snapshot_id"],
        )
        for job in view.jobs:
            key = [job.namespace or "", job.workload or "", job.target]
            if job.latest.step_time_ms is not None:
                step.add_metric(key, job.latest.step_time_ms / 1000)
            if job.step_time_ratio is not None:
                ratio.add_metric(key, job.step_time_ratio)
                regression.add_metric(key, float(job.regressed))
            for rule, severity in _pairs(job.latest.findings):
                latest.add_metric([*key, rule, severity, job.latest.id], 1)
        yield from (step, ratio, regression, latest)

    @staticmethod
    def _findings(view: FleetView) -> Metric:
        findings = CounterMetricFamily(
            "profiler_fleet_findings",
            "Ready snapshots with a finding of this rule; the exemplar is the newest one.",
            labels=["namespace", "workload", "target", "rule", "severity"],
        )
        for k, (n, snapshot_id, created_at) in sorted(view.findings.items()):
            when = datetime.fromisoformat(created_at).timestamp()
            findings.add_metric(
                list(k), n, exemplar=Exemplar({"snapshot_id": snapshot_id}, 1, when)
            )
        return findings

    def _alerts(self) -> Metric:
        alerts = CounterMetricFamily(
            "profiler_fleet_alerts",
            "Webhook alerts the hub routed, by source and outcome (no_sidecar and "
            "sidecar_unreachable are the hub's own).",
            labels=["source", "outcome"],
        )
        for (source, outcome), n in sorted(self.alert_log.counts().items()):
            alerts.add_metric([source, outcome], n)
        return alerts

    def _explain_asks(self) -> Iterator[Metric]:
        if self.explain is None:
            return
        asks = CounterMetricFamily(
            "profiler_fleet_explain_asks",
            "Captures this hub asked sidecars for, to explain the ledger's no_capture idle "
            "hours (hub_explain_idle), by the sidecar's answer (sidecar_unreachable: none).",
            labels=["outcome"],
        )
        for outcome, n in self.explain.counts().items():
            asks.add_metric([outcome], n)
        yield asks

    def _sync(self) -> Iterator[Metric]:
        sync = self.fleet_sync
        yield CounterMetricFamily(
            "profiler_fleet_syncs",
            "Syncs of the bucket into the fleet index.",
            value=sync.syncs_total,
        )
        yield CounterMetricFamily(
            "profiler_fleet_sync_failures",
            "Syncs that could not list or read the bucket.",
            value=sync.failures_total,
        )
        if sync.last is not None:
            yield GaugeMetricFamily(
                "profiler_fleet_sync_duration_seconds",
                "How long the last successful sync took.",
                value=sync.last.duration_s,
            )
            yield GaugeMetricFamily(
                "profiler_fleet_sync_timestamp_seconds",
                "When the last successful sync ended (Unix time).",
                value=sync.last_success_s or 0,
            )

    def _ledger(self, ledger: Ledger | None) -> Iterator[Metric]:
        """The ledger the hub last built for its metric window (never built here: a scrape does
        not wait on Prometheus)."""
        hours = GaugeMetricFamily(
            "profiler_fleet_gpu_hours",
            "GPU-hours of each job over the ledger's metric window (hub_ledger_metric_window_s): "
            "state held, busy, idle (by cause) and recoverable (the findings' predicted "
            "savings), with recoverable_low and recoverable_high (their ranges). Without "
            "Prometheus (hub_prometheus_url) none.",
            labels=["namespace", "workload", "state", "cause"],
        )
        cost = GaugeMetricFamily(
            "profiler_fleet_gpu_cost",
            "What each job's GPU-hours of the metric window cost at hub_gpu_hour_prices, in "
            "hub_gpu_hour_currency: state held, idle and recoverable (with recoverable_low and "
            "recoverable_high).",
            labels=["namespace", "workload", "state"],
        )
        for job in ledger.jobs if ledger else []:
            key = [job.namespace or "", job.job]
            if job.gpu_hours is None:
                continue
            hours.add_metric([*key, "held", ""], job.gpu_hours)
            hours.add_metric([*key, "busy", ""], job.busy_gpu_hours or 0.0)
            for cause, h in sorted(job.idle_by_cause.items()):
                hours.add_metric([*key, "idle", cause], h)
            hours.add_metric([*key, "recoverable", ""], job.recoverable_gpu_hours or 0.0)
            for bound, h in zip(_BOUNDS, job.recoverable_gpu_hours_range or (), strict=False):
                hours.add_metric([*key, bound, ""], h)
            if job.cost is not None:
                cost.add_metric([*key, "held"], job.cost)
                cost.add_metric([*key, "idle"], job.idle_cost or 0.0)
                cost.add_metric([*key, "recoverable"], job.recoverable_cost or 0.0)
                for bound, c in zip(_BOUNDS, job.recoverable_cost_range or (), strict=False):
                    cost.add_metric([*key, bound], c)
        yield from (hours, cost)


_BOUNDS = ("recoverable_low", "recoverable_high")


def _pairs(findings: str) -> list[tuple[str, str]]:
    """(rule, severity) of each finding of an index row (`rule:severity ...`)."""
    return [tuple(token.rsplit(":", 1)) for token in findings.split()]  # type: ignore[misc]


class FleetMetrics:
    def __init__(
        self,
        collector: FleetCollector,
        registry: CollectorRegistry | None = None,
        loops: Callable[[], list[LoopHealth]] = list,
    ):
        self.collector = collector
        self.registry = registry or CollectorRegistry()
        self.registry.register(collector)
        self.registry.register(LoopCollector(loops))
        self._lock = threading.Lock()
        # content type -> (its encoder, id(family) -> (the family, its encoding)): the formats
        # scraped, each with what its last scrape encoded
        self._encoded: dict[str, tuple[Callable, dict[int, tuple[Metric, bytes]]]] = {}

    def render(self, accept: str | None, reach: Reach = EVERYWHERE) -> tuple[bytes, str]:
        """The exposition; a tenant's holds only its namespaces' series (and the hub's own)."""
        encoder, content_type = choose_encoder(accept or "")
        if not reach.everywhere:
            scoped = CollectorRegistry()
            scoped.register(_Within(self.registry, reach))
            return encoder(scoped), content_type
        return self._encode(encoder, content_type), content_type

    def prepare(self) -> None:
        """Build and encode now what the next scrape would (the fleet view after a sync that
        changed the index, the ledger after a refresh), in the formats scraped before: the
        sync's and the ledger's threads call this, so that a scrape seldom builds anything.
        Nothing before the first scrape; a failure (the index down) is the next scrape's."""
        with self._lock:
            formats = [(encoder, content_type) for content_type, (encoder, _) in
                       self._encoded.items()]  # fmt: skip
        if not formats:
            return
        try:
            self.collector.views.refresh(self.collector.fleet_sync.version)
            for encoder, content_type in formats:
                self._encode(encoder, content_type)
        except Exception as exc:  # the loop calling it is not the one failing
            log.debug("the fleet metrics could not be prepared: %s", exc)

    def _encode(self, encoder: Callable, content_type: str) -> bytes:
        """Every family encoded; one the collector yields again (the same object: its view or
        ledger unchanged) is encoded once per format, then reused."""
        openmetrics = content_type.startswith("application/openmetrics-text")
        with self._lock:
            known = self._encoded.get(content_type, (encoder, {}))[1]
        blocks, kept = [], {}
        for family in self.registry.collect():
            hit = known.get(id(family))
            if hit is not None and hit[0] is family:
                block = hit[1]
            else:
                block = encoder(_Families([family]))
                if openmetrics:
                    block = block.removesuffix(_EOF)
            kept[id(family)] = (family, block)
            blocks.append(block)
        with self._lock:
            self._encoded[content_type] = (encoder, kept)
        return b"".join(blocks) + (_EOF if openmetrics else b"")


_EOF = b"# EOF\n"


class _Families:
    """Families as an encoder reads a registry."""

    def __init__(self, families: Iterable[Metric]):
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class _Within:
    """A registry's families, keeping the samples whose namespace the reach allows and those
    that name none."""

    def __init__(self, registry: CollectorRegistry, reach: Reach):
        self.registry, self.reach = registry, reach

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            kept = copy.copy(family)
            kept.samples = [
                s
                for s in family.samples
                if "namespace" not in s.labels or self.reach.allows(s.labels["namespace"] or None)
            ]
            yield kept
