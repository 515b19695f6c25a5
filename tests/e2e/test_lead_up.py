"""An alert-triggered snapshot shows what led up to the alert: the agent's own per-second
samples and a real Prometheus's history of the job, drawn in the report (real Chromium).

The job's reader gets six times slower partway through (`--slow-down`); the alert arrives after
that. The lead-up must show the jump on both sources, before the alert's `startsAt`. Asked: more
than twice the step time, a margin that another process burning a core does not erase.
"""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import httpx
from helpers import free_port, launch_job, wait_for_status, wait_ready

if TYPE_CHECKING:
    from prometheus_server import Prometheus  # noqa: F401

pytest_plugins = ["prometheus_server"]

SLOW_DOWN_AFTER_S = 12
STEP_TIME = (
    "1000 * rate(profiler_training_step_duration_seconds_sum{job=$target}[3s])"
    " / rate(profiler_training_step_duration_seconds_count{job=$target}[3s])"
)


def medians(points: list[list[float]], split_at: float) -> tuple[float, float]:
    before = [v for t, v in points if t < split_at - 1]
    after = [v for t, v in points if t > split_at + 4]  # a 3 s rate() needs the new steps
    assert len(before) >= 3 and len(after) >= 2, points
    return statistics.median(before), statistics.median(after)


def test_an_alerts_snapshot_shows_the_step_time_jump_that_led_up_to_it(
    prometheus, browser, tmp_path
):
    agent_port = free_port()
    prom = prometheus({"local": f"127.0.0.1:{agent_port}"})
    queries = [{"name": "step_time_ms", "expr": STEP_TIME, "unit": "ms"}]
    job = wait_ready(
        launch_job(
            "--workload",
            "input-bound",
            "--agent",
            "--agent-port",
            str(agent_port),
            "--store",
            str(tmp_path / "store"),
            "--slow-down",
            str(SLOW_DOWN_AFTER_S),
            "12",
            env={
                "PROFILER_PROMETHEUS_URL": prom.url,
                "PROFILER_PROMETHEUS_QUERIES": json.dumps(queries),
            },
        )
    )
    try:
        slow_down_at = job.ready["slow_down_at"]
        # The alert comes once Prometheus has scraped the job 8 s past the slow-down (by the
        # scrape's own time): both sources of the lead-up then hold the slower steps.
        prom.wait_for(
            'timestamp(up{job="local"})',
            lambda scraped_at: scraped_at >= slow_down_at + 8,
            timeout_s=SLOW_DOWN_AFTER_S + 60,
            what="a scrape of the job 8 s after its slow-down",
        )
        prom.wait_for('up{job="local"}', lambda v: v == 1, what="agent scraped")
        starts_at = datetime.now(UTC) - timedelta(seconds=3)
        alert = {
            "version": "4",
            "status": "firing",
            "receiver": "profiler",
            "groupKey": '{}:{alertname="StepTimeHigh"}',
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "StepTimeHigh", "job": "local"},
                    "annotations": {"summary": "step time jumped"},
                    "startsAt": starts_at.isoformat(),
                    "fingerprint": "1a2b3c4d5e6f7a8b",
                }
            ],
        }
        with httpx.Client(base_url=job.ready["agent_url"], timeout=120) as client:
            answer = client.post("/webhooks/alertmanager", json=alert)
            assert answer.status_code == 202, answer.text
            [outcome] = answer.json()["alerts"]
            assert outcome["outcome"] == "captured", outcome
            snapshot = wait_for_status(client, outcome["snapshot_id"], {"ready", "failed"})
        assert snapshot["status"] == "ready", snapshot.get("error")

        series = {(s["name"], s["source"]): s for s in snapshot["lead_up"]["series"]}
        # The agent's own samples: step time before and after the slow-down.
        before, after = medians(series["step_time_ms", "agent"]["points"], slow_down_at)
        assert after > 2 * before, (before, after)
        # Prometheus's, over the same minutes, asked with the target's name quoted in.
        from_prometheus = series["step_time_ms", "prometheus"]
        assert 'job="local"' in from_prometheus["query"]
        before_p, after_p = medians(from_prometheus["points"], slow_down_at)
        assert after_p > 2 * before_p, (before_p, after_p)
        assert from_prometheus["points"][0][0] <= slow_down_at - 5  # long before the jump

        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(f"{job.ready['agent_url']}/profiles/{snapshot['id']}/report")
        lead_up = page.locator("#lead-up")
        assert lead_up.is_visible()
        charts = page.locator("#lead-up svg.lead-up-chart")
        assert charts.count() >= 3  # agent step time, steps/s, memory; Prometheus step time
        step_chart = page.locator('#lead-up svg.lead-up-chart[data-series="step_time_ms"]').first
        box = step_chart.bounding_box()
        assert box and box["width"] > 500 and box["height"] > 50
        points = step_chart.locator("polyline").get_attribute("points").split()
        assert len(points) >= 10
        # The alert's start is drawn before the capture window, and both on every chart.
        alert_x = float(step_chart.locator("line.mark-alert-started").get_attribute("x1"))
        capture_x = float(step_chart.locator("rect.mark-capture").get_attribute("x"))
        assert 0 < alert_x < capture_x
        assert "alert started" in lead_up.inner_text()
        page.screenshot(path=str(tmp_path / "lead-up.png"), full_page=True)
        page.close()
    finally:
        job.stop()
