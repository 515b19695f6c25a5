"""The hub killed in the middle of an alert burst and started again: a real Alertmanager (the
deploy routing, tests/alertmanager_server.py) retries what the dead hub did not take, and every
alert ends with an outcome; none is captured twice.

One `profiler-service hub` on a fixed loopback port and one sidecar registered with it whose
target is a port where nothing listens (its captures fail at once: what is checked is that each
alert was decided, not the capture; tests/e2e/test_fleet.py captures real jobs).
"""

from __future__ import annotations

from collections import Counter

import httpx
from alertmanager_server import fire, start_alertmanager
from helpers import free_port, start_hub, start_service, stop_process
from s3_server import wait_until
from test_hub_routing import HUB_TOKEN, NOWHERE, WEBHOOK_TOKEN, sidecar_env

BURST = [f"BurstAlert{i}" for i in range(6)]
POD, NAMESPACE = "trainer-a-0", "team-a"


def am_failed_notifications(am_url: str) -> float:
    """Alertmanager's own count of webhook notifications that failed (before its retries)."""
    text = httpx.get(f"{am_url}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("alertmanager_notifications_failed_total{")
        and 'integration="webhook"' in line
    )


def test_every_alert_of_a_burst_has_an_outcome_after_the_hub_restarts(tmp_path):
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    hub_env = {
        "PROFILER_STORE_URL": f"file://{bucket}",
        "PROFILER_HUB_TOKEN": HUB_TOKEN,
        "PROFILER_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
        "PROFILER_HUB_SIDECAR_TTL_S": "30",
    }
    port = free_port()
    hub = start_hub(tmp_path / "hub", hub_env, port)
    sidecar = start_service(
        tmp_path / "sidecar", [f"trainer={NOWHERE}"], sidecar_env(hub.url, POD, NAMESPACE)
    )
    processes: list = []
    auth = {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}

    def decided() -> Counter[str]:
        """Outcomes the hub recorded, by alert name (its log is kept across restarts)."""
        log = httpx.get(f"{hub.url}/webhooks/alerts", params={"limit": 1000}, headers=auth)
        return Counter(o["labels"]["alertname"] for o in log.json()["data"])

    try:
        wait_until(
            lambda: httpx.get(f"{hub.url}/sidecars", headers=auth).json()["count"] == 1,
            30,
            "the sidecar's registration",
        )
        am_url = start_alertmanager(tmp_path, hub.url, WEBHOOK_TOKEN, processes)
        for name in BURST[:3]:
            fire(am_url, alertname=name, namespace=NAMESPACE, pod=POD)
        wait_until(lambda: decided(), 60, "the burst's first outcome")
        hub.kill()  # mid burst: SIGKILL, as a node dies
        for name in BURST[3:]:
            fire(am_url, alertname=name, namespace=NAMESPACE, pod=POD)
        wait_until(lambda: am_failed_notifications(am_url) > 0, 60, "a failed notification")
        hub = start_hub(tmp_path / "hub", hub_env, port)
        outcomes = wait_until(
            lambda: set(BURST) <= set(found := decided()) and found, 120, "every alert decided"
        )
        log = httpx.get(f"{hub.url}/webhooks/alerts", params={"limit": 1000}, headers=auth)
        kinds = Counter(o["outcome"] for o in log.json()["data"])
        with sidecar.client() as client:
            snapshots = client.get("/profiles", params={"trigger": "webhook", "limit": 500})
        fingerprints = Counter(s["trigger"]["fingerprint"] for s in snapshots.json()["data"])
    finally:
        for proc in processes:
            stop_process(proc, timeout_s=15)
        sidecar.stop()
        hub.stop()
    print(f"outcomes by alert: {dict(outcomes)}; by kind: {dict(kinds)}")
    assert set(outcomes) == set(BURST)
    assert fingerprints and max(fingerprints.values()) == 1, fingerprints  # none captured twice
