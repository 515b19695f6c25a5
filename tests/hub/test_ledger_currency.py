"""Costs carry their currency (hub_gpu_hour_currency): the ledger's JSON, `profiler-service
ledger` and the fleet page say what the numbers are in (they printed `1234.00` alone)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from profiler_service.config import HubSettings, ReportSettings
from profiler_service.hub.gpu_hours import GpuHours, PodGpuHours
from profiler_service.hub.ledger import build_ledger
from profiler_service.hub.ledger_text import format_ledger
from profiler_service.hub.views import FleetView, render_fleet

END = 1_796_400_000.0  # on the hour


def ledger(**settings):
    """One pod of 8 H100s, held a whole day, busy half of it: 192 GPU-hours."""
    ledger_settings = HubSettings(store_url="file:///nowhere", **settings).ledger

    def gpu_hours(start: int, end: int, bucket_s: int) -> GpuHours:
        ends = range(start + bucket_s, end + 1, bucket_s)
        pod = PodGpuHours("team-a", "trainer-7f9c-0", "NVIDIA H100 80GB HBM3",
                          held_s={e: 8.0 * bucket_s for e in ends},
                          busy_s={e: 4.0 * bucket_s for e in ends})  # fmt: skip
        return GpuHours([pod], "counted from the test's pods")

    return build_ledger([], ledger_settings, window_s=86400, end=END, gpu_hours=gpu_hours)


def test_costs_are_shown_with_their_currency():
    priced = ledger(hub_gpu_hour_prices="H100=4.5", hub_gpu_hour_currency="EUR")
    assert priced.currency == "EUR" and priced.totals.cost == 192 * 4.5
    assert '"currency":"EUR"' in priced.model_dump_json()
    text = format_ledger(priced)
    assert "  cost 864.00 EUR, idle 432.00" in text
    assert "  cost EUR  idle by cause" in text  # the jobs' column
    end = datetime.fromtimestamp(END, UTC)
    page = render_fleet(FleetView(end - timedelta(days=1), end, [], {}, 0), [], ReportSettings(),
                        priced)  # fmt: skip
    assert "864.00 EUR spent" in page and "<th>cost (EUR)</th>" in page


def test_the_currency_is_usd_unless_set_and_absent_without_prices():
    assert ledger(hub_gpu_hour_prices="*=2").currency == "USD"
    unpriced = ledger()
    assert unpriced.currency is None and unpriced.totals.cost is None
    assert "cost USD" not in format_ledger(unpriced)
