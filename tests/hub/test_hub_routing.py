"""The hub routes alerts and captures to the sidecars that registered: real processes.

One `profiler-service hub` and two `profiler-service serve` sidecars on loopback, each sidecar
registering itself with PROFILER_HUB_URL. Their targets point at a port where nothing listens, so
every capture they start fails at once: what is checked is where each alert went and what the
hub answered, not the capture (tests/e2e/test_fleet.py captures real jobs).
"""

from __future__ import annotations

import json
import signal

import httpx
import pytest
from fleet_samples import HUB_TOKEN, NOWHERE, sidecar_env
from helpers import free_port, start_hub, start_service, stop_process
from s3_server import wait_until

WEBHOOK_TOKEN = "am-token"


def alert(status: str = "firing", **labels: str) -> dict:
    return {
        "status": status,
        "labels": {"alertname": "TrainingGpuUnderused", **labels},
        "annotations": {"profile_duration": "500ms"},
        "startsAt": "2026-12-03T08:00:00Z",
        "fingerprint": f"fp-{'-'.join(labels.values())}-{status}",
    }


def payload(*alerts: dict) -> dict:
    return {"version": "4", "receiver": "profiler-hub", "status": "firing", "alerts": list(alerts)}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    bucket = root / "bucket"
    bucket.mkdir()
    hub = start_hub(
        root / "hub",
        {
            "PROFILER_STORE_URL": f"file://{bucket}",
            "PROFILER_HUB_TOKEN": HUB_TOKEN,
            "PROFILER_HUB_SIDECAR_TTL_S": "3",
            "PROFILER_HUB_FORWARD_TIMEOUT_S": "3",
            "PROFILER_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
        },
    )
    sidecars = {
        name: start_service(root / name, [f"{target}={NOWHERE}"], sidecar_env(hub.url, pod, ns))
        for name, target, pod, ns in (
            ("a", "trainer", "trainer-a-0", "team-a"),
            ("b", "ranker", "ranker-0", "team-b"),
        )
    }
    client = hub.client(headers={"Authorization": f"Bearer {WEBHOOK_TOKEN}"})
    wait_until(lambda: client.get("/sidecars").json()["count"] == 2, 30, "two registrations")
    yield hub, sidecars, client
    client.close()
    for s in sidecars.values():
        s.stop()
    hub.stop()


def test_the_hub_lists_the_sidecars_that_registered(fleet):
    _hub, sidecars, client = fleet
    listing = client.get("/sidecars").json()
    by_name = {s["name"]: s for s in listing["data"]}
    assert by_name["trainer-a-0"]["namespace"] == "team-a"
    assert by_name["trainer-a-0"]["targets"] == ["trainer"]
    assert by_name["trainer-a-0"]["url"] == sidecars["a"].url
    assert by_name["ranker-0"]["targets"] == ["ranker"]
    assert all(s["via"] == "hub" and s["last_seen"] for s in listing["data"])
    assert client.get("/sidecars", params={"namespace": "team-b"}).json()["count"] == 1


def test_registration_needs_the_hub_token(fleet):
    hub, _, _ = fleet
    record = {"name": "intruder", "targets": ["x"], "url": "http://127.0.0.1:9"}
    no_token = httpx.put(f"{hub.url}/sidecars/intruder", json=record)
    assert no_token.status_code == 401 and no_token.json()["error"] == "unauthorized"
    wrong = httpx.put(
        f"{hub.url}/sidecars/intruder", json=record, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 403 and wrong.json()["error"] == "forbidden"
    bad_url = httpx.put(
        f"{hub.url}/sidecars/intruder",
        json={**record, "url": "file:///etc"},
        headers={"Authorization": f"Bearer {HUB_TOKEN}"},
    )
    assert bad_url.status_code == 422 and bad_url.json()["error"] == "invalid_request"
    bad_target = httpx.put(
        f"{hub.url}/sidecars/intruder",
        json={**record, "targets": ["Not A Target"]},
        headers={"Authorization": f"Bearer {HUB_TOKEN}"},
    )
    assert bad_target.status_code == 422 and "targets" in bad_target.json()["detail"]


def test_each_alert_goes_to_the_sidecar_its_labels_name(fleet):
    _hub, sidecars, client = fleet
    body = payload(
        alert(pod="trainer-a-0", namespace="team-a"),  # by pod
        alert(profile_target="ranker"),  # by target
        alert(pod="somebody-else-0", namespace="team-c"),  # nobody
        alert(status="resolved", pod="nowhere-0"),
        alert(job="ranker", instance="10.0.0.1:8080", address="http://evil.example"),  # by job
    )
    answer = client.post("/webhooks/alertmanager", json=body)
    assert answer.status_code == 202, answer.text
    outcomes = answer.json()["alerts"]
    first, second, third, fourth, fifth = outcomes
    assert first["outcome"] == "captured" and first["sidecar"] == "team-a/trainer-a-0"
    assert first["target"] == "trainer" and first["snapshot_id"]
    assert second["outcome"] == "captured" and second["sidecar"] == "team-b/ranker-0"
    assert third["outcome"] == "no_sidecar" and third["reason"] == "no_matching_sidecar"
    assert "team-c" in third["detail"]
    assert fourth["outcome"] == "resolved"
    # Another alert for the same sidecar: it decides (one capture of a target at a time).
    assert fifth["sidecar"] == "team-b/ranker-0"
    assert fifth["outcome"] in {"skipped_busy", "captured"}

    # The sidecars decided themselves: their own alert logs hold what the hub passed on.
    with sidecars["a"].client() as a:
        theirs = a.get("/webhooks/alerts").json()["data"]
    assert [o["fingerprint"] for o in theirs] == ["fp-trainer-a-0-team-a-firing"]
    assert theirs[0]["labels"]["profile_target"] == "trainer"
    with sidecars["a"].client() as a:
        snapshot = a.get(f"/profiles/{first['snapshot_id']}").json()
    assert snapshot["pod"] == "trainer-a-0" and snapshot["namespace"] == "team-a"
    assert snapshot["trigger"]["source"] == "alertmanager:TrainingGpuUnderused"

    # The hub keeps its own record, and counts it for Prometheus.
    hub_log = client.get("/webhooks/alerts").json()
    assert hub_log["counts"]["alertmanager"]["no_sidecar"] >= 1
    metrics = client.get("/metrics").text
    assert 'profiler_fleet_alerts_total{outcome="no_sidecar",source="alertmanager"}' in metrics
    assert 'profiler_fleet_sidecars{namespace="team-a"} 1.0' in metrics


def test_the_same_alert_again_is_deduplicated_by_the_sidecar(fleet):
    _hub, _sidecars, client = fleet
    body = payload(alert(pod="trainer-a-0", namespace="team-a"))
    again = client.post("/webhooks/alertmanager", json=body).json()["alerts"][0]
    assert again["outcome"] == "deduplicated" and again["reason"] == "cooldown"


def test_the_hub_checks_its_own_webhook_credentials(fleet):
    hub, _, _ = fleet
    body = payload(alert(pod="trainer-a-0"))
    assert httpx.post(f"{hub.url}/webhooks/alertmanager", json=body).status_code == 401
    bad = httpx.post(
        f"{hub.url}/webhooks/grafana", content=b"[1]",
        headers={"Authorization": f"Bearer {WEBHOOK_TOKEN}"},
    )  # fmt: skip
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_payload"


def test_an_operator_capture_goes_to_the_sidecar_of_the_target(fleet):
    _hub, _sidecars, client = fleet
    started = client.post("/profile", params={"target": "ranker", "duration": "200ms"})
    assert started.status_code in (202, 409), started.text
    assert started.headers["x-profiler-sidecar"] == "team-b/ranker-0"
    nobody = client.post("/profile", params={"target": "nothing-here"})
    assert nobody.status_code == 404
    assert nobody.json()["error"] == "no_sidecar"
    bad = client.post("/profile", params={"target": "ranker", "duration": "999m"})
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_duration"


def test_a_killed_sidecar_is_unreachable_then_drops_out_after_the_ttl(fleet, tmp_path):
    hub, _, client = fleet
    env = sidecar_env(hub.url, "doomed-0", "team-d")
    doomed = start_service(tmp_path / "doomed", [f"doomed={NOWHERE}"], env)
    wait_until(
        lambda: any(s["name"] == "doomed-0" for s in client.get("/sidecars").json()["data"]),
        30,
        "the registration",
    )
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()
    body = payload(alert(pod="doomed-0", namespace="team-d"))
    first = client.post("/webhooks/alertmanager", json=body).json()["alerts"][0]
    assert first["outcome"] == "sidecar_unreachable", first
    assert first["sidecar"] == "team-d/doomed-0"
    wait_until(
        lambda: all(s["name"] != "doomed-0" for s in client.get("/sidecars").json()["data"]),
        10,
        "the TTL",
    )
    later = client.post("/webhooks/alertmanager", json=body).json()["alerts"][0]
    assert later["outcome"] == "no_sidecar"
    stop_process(doomed.proc)


def test_a_sidecar_that_stops_gracefully_deregisters(fleet, tmp_path):
    hub, _, client = fleet
    env = sidecar_env(hub.url, "brief-0", "team-e")
    brief = start_service(tmp_path / "brief", [f"brief={NOWHERE}"], env)
    wait_until(lambda: client.get("/sidecars", params={"namespace": "team-e"}).json()["count"], 30)
    brief.stop()
    assert client.get("/sidecars", params={"namespace": "team-e"}).json()["count"] == 0


def test_a_sidecar_keeps_serving_while_the_hub_is_down(tmp_path):
    env = sidecar_env(f"http://127.0.0.1:{free_port()}", "alone-0", "team-f")
    alone = start_service(tmp_path / "alone", [f"alone={NOWHERE}"], env)
    try:
        with alone.client() as c:
            assert c.get("/healthz").status_code == 200
            assert c.get("/profiles").status_code == 200
        assert "could not register with the hub" in alone.log.read_text()
    finally:
        alone.stop()


def test_a_payload_for_many_sidecars_is_answered_in_order(fleet):
    _hub, _, client = fleet
    alerts = [alert(pod=p, namespace=n) for p, n in [("ranker-0", "team-b")] * 3]
    answer = client.post("/webhooks/alertmanager", json=payload(*alerts)).json()
    assert [a["sidecar"] for a in answer["alerts"]] == ["team-b/ranker-0"] * 3
    assert answer["received"] == 3
    json.dumps(answer)
