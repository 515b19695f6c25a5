"""The fleet page's header counts the jobs the page shows: the ledger's (held GPUs, from
Prometheus) and those with a ready snapshot, which need not be the same (a fleet whose jobs
were never captured has a ledger of 5 and no snapshot: its header said "0 jobs")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from profiler_service.config import ReportSettings
from profiler_service.hub.ledger import JobLedger, Ledger
from profiler_service.hub.views import FleetView, render_fleet

END = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def header(html: str) -> str:
    start = html.index('<span id="jobs-count">') + len('<span id="jobs-count">')
    return html[start : html.index("</span>", start)]


def test_the_header_counts_the_ledger_s_jobs_beside_the_captured_ones():
    view = FleetView(END - timedelta(days=7), END, [], {}, 0)
    jobs = [
        JobLedger(namespace="team-a", job=f"job-{i}", gpus=8, gpu_hours=100.0) for i in range(5)
    ]
    ledger = Ledger(window="7d", start=0, end=END.timestamp(), source="prometheus", jobs=jobs)
    html = render_fleet(view, [], ReportSettings(), ledger)
    assert html.count('<tr data-job="team-a/job-') == 5  # the ledger's table: five jobs
    assert header(html) == "5 jobs in the ledger, 0 with a ready snapshot"


def test_without_a_ledger_the_header_counts_the_captured_jobs():
    view = FleetView(END - timedelta(days=7), END, [], {}, 0)
    assert header(render_fleet(view, [], ReportSettings())) == "0 jobs with a ready snapshot"
