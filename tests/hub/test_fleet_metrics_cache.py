"""The hub's `/metrics` encodes a fleet view's and a ledger's series once per view, ledger and
format (hub/metrics.py): each scrape's exposition is byte for byte what prometheus_client
encodes of the whole registry, in the text format and in OpenMetrics, before and after the
view or the ledger changes; a tenant's scrape keeps only its namespaces."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from prometheus_client.exposition import choose_encoder

from profiler_service.config import LedgerSettings, ReportSettings
from profiler_service.hub.index.fleet_queries import FleetRow
from profiler_service.hub.ledger import JobLedger, Ledger
from profiler_service.hub.metrics import FleetCollector, FleetMetrics
from profiler_service.hub.views import FleetView, JobView
from profiler_service.tenancy import Reach

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def view(step_ms: float) -> FleetView:
    jobs, findings = [], {}
    for j in range(6):
        ns, target = f"team-{j % 2}", f"job-{j}"
        created = (NOW - timedelta(hours=j)).isoformat()
        snapshot_id = f"20261205-1{j}0000-{target}-{j:012x}"
        row = FleetRow(snapshot_id, ns, target, f"{target}-0", created, step_ms + j, "input",
                       "input_bound", "input_bound:warning", False, "rel")  # fmt: skip
        job = JobView(ns, "rel", target, latest=row, snapshots=2)
        job.step_time_ratio, job.regressed = 1.0 + j / 10, j > 1
        jobs.append(job)
        findings[(ns, "rel", target, "input_bound", "warning")] = (j + 1, row.id, created)
    return FleetView(NOW - timedelta(days=7), NOW, jobs, {"input_bound": 6}, 12, findings)


def ledger(hours: float) -> Ledger:
    jobs = [JobLedger(namespace=f"team-{j % 2}", job=f"rel-{j}", gpus=8, gpu_hours=hours + j,
                      busy_gpu_hours=hours / 2, idle_by_cause={"input": hours / 4})
            for j in range(3)]  # fmt: skip
    return Ledger(window="1d", start=0, end=NOW.timestamp(), source="prometheus", jobs=jobs)


class Book:
    settings = LedgerSettings()

    def __init__(self):
        self.built: Ledger | None = None

    def latest(self, window_s: float) -> Ledger | None:
        return self.built


@pytest.fixture
def hub():
    index = SimpleNamespace(count_by_status=lambda: [("team-0", "ready", 4), (None, "failed", 1)])
    alerts = {("alertmanager", "captured"): 2}
    sync = SimpleNamespace(syncs_total=3, failures_total=0, last=None, last_success_s=None,
                           baseline_ids=frozenset(), version="1")  # fmt: skip
    book = Book()
    collector = FleetCollector(
        ReportSettings(),
        index,  # type: ignore[arg-type]
        SimpleNamespace(live=list),  # type: ignore[arg-type]
        SimpleNamespace(counts=lambda: alerts),  # type: ignore[arg-type]
        sync,
        book,  # type: ignore[arg-type]
    )
    shown = {"view": view(100.0)}
    collector.views.get = lambda version: shown["view"]  # type: ignore[method-assign]
    collector.views.refresh = lambda version: None  # type: ignore[method-assign]
    metrics = FleetMetrics(collector)
    return SimpleNamespace(metrics=metrics, shown=shown, book=book, alerts=alerts, sync=sync)


def whole(metrics: FleetMetrics, accept: str | None) -> bytes:
    """What prometheus_client encodes of the whole registry, families built afresh."""
    collector = metrics.collector
    kept = collector._of_view, collector._of_ledger
    collector._of_view = collector._of_ledger = (None, [])
    encoder, _ = choose_encoder(accept or "")
    try:
        return encoder(metrics.registry)
    finally:
        collector._of_view, collector._of_ledger = kept


@pytest.mark.parametrize("accept", [None, OPENMETRICS])
def test_each_scrape_is_the_whole_registry_encoded(hub, accept):
    first, content_type = hub.metrics.render(accept)
    assert content_type == choose_encoder(accept or "")[1]
    assert b"profiler_fleet_step_time_seconds" in first
    again, _ = hub.metrics.render(accept)
    assert again == first == whole(hub.metrics, accept)
    # What changes between scrapes shows at once; the view's series were not encoded again.
    hub.alerts[("alertmanager", "no_sidecar")] = 1
    hub.sync.syncs_total = 4
    cached = hub.metrics._encoded[choose_encoder(accept or "")[1]][1]
    third, _ = hub.metrics.render(accept)
    assert b'outcome="no_sidecar"' in third and b"profiler_fleet_syncs_total 4.0" in third
    family = hub.metrics.collector._of_view[1][0]
    assert cached[id(family)][1] in third
    # A new view (after a sync) and a new ledger: their series, encoded anew.
    hub.shown["view"] = view(250.0)
    hub.book.built = ledger(10.0)
    fourth, _ = hub.metrics.render(accept)
    assert b"0.25" in fourth and b'state="held"' in fourth
    assert fourth == whole(hub.metrics, accept)
    if accept:
        assert fourth.endswith(b"# EOF\n") and fourth.count(b"# EOF") == 1
        assert b'# {snapshot_id="' in fourth  # the exemplars


def test_prepare_encodes_the_formats_scraped_before(hub):
    hub.metrics.prepare()  # nothing scraped yet: nothing to do
    assert hub.metrics._encoded == {}
    hub.metrics.render(OPENMETRICS)
    hub.shown["view"] = view(300.0)
    hub.metrics.prepare()
    (content_type,) = hub.metrics._encoded
    families = hub.metrics.collector._of_view[1]
    encoded = hub.metrics._encoded[content_type][1]
    assert all(encoded[id(f)][0] is f for f in families)  # the new view's, encoded
    assert b"0.3" in hub.metrics.render(OPENMETRICS)[0]


def test_a_tenants_scrape_keeps_its_namespaces(hub):
    hub.metrics.render(None)
    body, _ = hub.metrics.render(None, Reach(frozenset({"team-1"})))
    assert b'namespace="team-1"' in body and b'namespace="team-0"' not in body
    assert b"profiler_fleet_syncs_total" in body
