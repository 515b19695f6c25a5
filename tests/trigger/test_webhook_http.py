"""The webhook endpoints over HTTP: payloads, credentials, signatures, sizes, error shapes."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest
from alert_samples import alertmanager, am_alert, body, grafana
from fastapi.testclient import TestClient

from profiler_service.api.app import create_app
from profiler_service.api.auth import sign

SECRET = "hmac-secret"
JSON = {"Content-Type": "application/json"}
TRAINER_PODS = [{"label": "pod", "pattern": r"trainer-\d+", "target": "trainer"}]


@pytest.fixture
def client_for(make_service):
    clients: list[TestClient] = []

    def make(**settings) -> TestClient:
        client = TestClient(create_app(make_service(**settings)))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_grafana_documented_payload_gets_202_with_an_outcome_per_alert(client_for):
    client = client_for(webhook_target_labels="zone", webhook_min_interval_s=0)
    data = grafana()
    data["alerts"][0]["labels"]["zone"] = "trainer"
    response = client.post("/webhooks/grafana", content=body(data), headers=JSON)
    assert response.status_code == 202, response.text
    result = response.json()
    assert result["source"] == "grafana" and result["receiver"] == "My Super Webhook"
    assert [a["outcome"] for a in result["alerts"]] == ["captured", "rejected"]
    assert result["counts"] == {"captured": 1, "rejected": 1}
    snapshot = client.get(f"/profiles/{result['alerts'][0]['snapshot_id']}").json()
    assert snapshot["trigger"]["kind"] == "webhook"
    assert snapshot["trigger"]["labels"]["alertname"] == "High memory usage"
    assert snapshot["trigger"]["fingerprint"] == "c6eadffa33fcdf37"
    assert snapshot["trigger"]["dashboard_url"] is None  # Grafana sends "" when it has none
    assert snapshot["links"]["alert"] == "https://play.grafana.org/alerting/1afz29v7z/edit"


def test_alertmanager_payload_with_unknown_fields_is_accepted(client_for):
    client = client_for(webhook_target_rules=TRAINER_PODS)
    data = alertmanager(someFutureField={"x": [1, 2]})
    data["alerts"][0]["newPerAlertField"] = 3
    data["alerts"][0]["labels"]["replicas"] = 4  # a number where a string belongs: kept as "4"
    response = client.post("/webhooks/alertmanager", content=body(data), headers=JSON)
    assert response.status_code == 202, response.text
    [alert] = response.json()["alerts"]
    assert alert["outcome"] == "captured" and alert["target"] == "trainer"
    assert alert["labels"]["replicas"] == "4"


def test_outcomes_are_listed_and_counted_and_persisted(client_for, tmp_path):
    client = client_for(webhook_target_rules=TRAINER_PODS)
    client.post("/webhooks/alertmanager", content=body(alertmanager()), headers=JSON)
    client.post("/webhooks/alertmanager", content=body(alertmanager()), headers=JSON)
    resolved = alertmanager(alerts=[am_alert("trainer", status="resolved")])
    client.post("/webhooks/alertmanager", content=body(resolved), headers=JSON)
    listed = client.get("/webhooks/alerts").json()
    assert [a["outcome"] for a in listed["data"]] == ["resolved", "deduplicated", "captured"]
    assert listed["counts"] == {"alertmanager": {"captured": 1, "deduplicated": 1, "resolved": 1}}
    assert client.app.state.service.alerts.log.flush()  # appended off the event loop
    persisted = (tmp_path / "store" / "webhooks" / "alerts.jsonl").read_text().splitlines()
    assert len(persisted) == 3
    metrics = client.get("/metrics").text
    for outcome, n in [("captured", 1), ("deduplicated", 1), ("resolved", 1), ("throttled", 0)]:
        series = f'profiler_webhook_alerts_total{{outcome="{outcome}",source="alertmanager"}}'
        assert f"{series} {n:.1f}" in metrics, series
    assert 'profiler_webhook_alerts_total{outcome="captured",source="grafana"} 0.0' in metrics


def test_an_alerts_capture_is_staged_off_the_event_loop(client_for, monkeypatch):
    """The staging record of a capture an alert starts (disk, SQLite) is written on a worker
    thread, never on the event loop; the outcomes come back in the payload's order."""
    client = client_for(webhook_target_rules=TRAINER_PODS, webhook_min_interval_s=0)
    store = client.app.state.service.store
    begin, on_loop = store.begin, []

    def noting_begin(snapshot):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return begin(snapshot)

    monkeypatch.setattr(store, "begin", noting_begin)
    data = alertmanager(alerts=[am_alert("trainer-0"), am_alert("x", status="resolved")])
    response = client.post("/webhooks/alertmanager", content=body(data), headers=JSON)
    assert [a["outcome"] for a in response.json()["alerts"]] == ["captured", "resolved"]
    assert on_loop == [False]


@pytest.mark.parametrize("path", ["/webhooks/grafana", "/webhooks/alertmanager"])
def test_bearer_token(client_for, path):
    client = client_for(webhook_token="hook-token")
    missing = client.post(path, content=body(grafana()), headers=JSON)
    assert missing.status_code == 401 and missing.json()["error"] == "unauthorized"
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    wrong = client.post(
        path, content=body(grafana()), headers={**JSON, "Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 403 and wrong.json()["error"] == "forbidden"
    right = client.post(
        path, content=body(grafana()), headers={**JSON, "Authorization": "Bearer hook-token"}
    )
    assert right.status_code == 202


def test_basic_auth_and_bearer_are_both_accepted_when_both_are_set(client_for):
    client = client_for(webhook_token="t", webhook_username="am", webhook_password="pw")
    missing = client.post("/webhooks/alertmanager", content=body(alertmanager()))
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"] == 'Bearer, Basic realm="profiler-service webhooks"'
    for headers, status in [
        (basic("am", "pw"), 202),
        ({"Authorization": "Bearer t"}, 202),
        (basic("am", "wrong"), 403),
        (basic("someone", "pw"), 403),
        ({"Authorization": "Basic not-base64!"}, 403),
        ({"Authorization": "Bearer pw"}, 403),
    ]:
        response = client.post(
            "/webhooks/alertmanager", content=body(alertmanager()), headers=headers
        )
        assert response.status_code == status, (headers, response.text)


def test_without_webhook_credentials_the_api_token_guards_webhooks(client_for):
    client = client_for(api_token="api")
    assert client.post("/webhooks/alertmanager", content=body(alertmanager())).status_code == 401
    ok = client.post(
        "/webhooks/alertmanager",
        content=body(alertmanager()),
        headers={"Authorization": "Bearer api"},
    )
    assert ok.status_code == 202


def test_no_credentials_configured_means_open_webhooks_on_loopback(client_for):
    client = client_for()
    assert client.post("/webhooks/alertmanager", content=body(alertmanager())).status_code == 202


def test_hmac_signature_over_the_body(client_for):
    client = client_for(webhook_hmac_secret=SECRET)
    raw = body(grafana())
    good = {"X-Grafana-Alerting-Signature": sign(SECRET, raw)}
    assert client.post("/webhooks/grafana", content=raw, headers=good).status_code == 202
    tampered = client.post("/webhooks/grafana", content=raw.replace(b"us-1", b"us-2"), headers=good)
    assert tampered.status_code == 401 and tampered.json()["error"] == "invalid_signature"
    assert "does not match the body" in tampered.json()["detail"]
    missing = client.post("/webhooks/grafana", content=raw)
    assert missing.status_code == 401
    assert "X-Grafana-Alerting-Signature header is missing" in missing.json()["detail"]
    upper = {"X-Grafana-Alerting-Signature": sign(SECRET, raw).upper()}
    assert client.post("/webhooks/grafana", content=raw, headers=upper).status_code == 202


def test_hmac_signature_with_a_timestamp_and_a_custom_header(client_for):
    client = client_for(
        webhook_hmac_secret=SECRET,
        webhook_hmac_header="X-Grafana-Alert-Signature",
        webhook_hmac_timestamp_header="X-Grafana-Alerting-Timestamp",
        webhook_hmac_max_age_s=300,
    )
    raw = body(grafana())

    def headers(ts: int, signed_ts: int | None = None) -> dict[str, str]:
        signed = str(ts if signed_ts is None else signed_ts)
        return {
            "X-Grafana-Alert-Signature": sign(SECRET, raw, signed),
            "X-Grafana-Alerting-Timestamp": str(ts),
        }

    now = int(time.time())
    assert client.post("/webhooks/grafana", content=raw, headers=headers(now)).status_code == 202
    # Signed over the body alone, where timestamp:body was expected.
    body_only = {
        "X-Grafana-Alert-Signature": sign(SECRET, raw),
        "X-Grafana-Alerting-Timestamp": str(now),
    }
    assert client.post("/webhooks/grafana", content=raw, headers=body_only).status_code == 401
    # A replayed timestamp that does not match what was signed.
    replay = client.post("/webhooks/grafana", content=raw, headers=headers(now, now - 1))
    assert replay.status_code == 401
    stale = client.post("/webhooks/grafana", content=raw, headers=headers(now - 400))
    assert stale.status_code == 401 and stale.json()["error"] == "invalid_signature"
    assert "s old; at most 300 s" in stale.json()["detail"]
    future = client.post("/webhooks/grafana", content=raw, headers=headers(now + 400))
    assert "in the future" in future.json()["detail"]
    no_ts = client.post(
        "/webhooks/grafana", content=raw, headers={"X-Grafana-Alert-Signature": sign(SECRET, raw)}
    )
    assert no_ts.status_code == 401 and "header is missing" in no_ts.json()["detail"]


def test_a_signature_stands_in_for_the_api_token(client_for):
    raw = body(grafana())
    signed = {"X-Grafana-Alerting-Signature": sign(SECRET, raw)}
    client = client_for(api_token="api", webhook_hmac_secret=SECRET)
    assert client.post("/webhooks/grafana", content=raw, headers=signed).status_code == 202
    # Alertmanager cannot sign: it still needs the API token.
    assert client.post("/webhooks/alertmanager", content=body(alertmanager())).status_code == 401


def test_signature_and_webhook_token_are_both_required_when_both_are_set(make_service, tmp_path):
    raw = body(grafana())
    service = make_service(webhook_token="hook", webhook_hmac_secret=SECRET)
    with TestClient(create_app(service)) as client:
        signed = {"X-Grafana-Alerting-Signature": sign(SECRET, raw)}
        assert client.post("/webhooks/grafana", content=raw, headers=signed).status_code == 401
        both = {**signed, "Authorization": "Bearer hook"}
        assert client.post("/webhooks/grafana", content=raw, headers=both).status_code == 202
        token_only = client.post(
            "/webhooks/grafana", content=raw, headers={"Authorization": "Bearer hook"}
        )
        assert token_only.status_code == 401 and token_only.json()["error"] == "invalid_signature"


def test_bodies_over_the_limit_get_413(client_for):
    client = client_for(webhook_max_body_bytes=4096)
    big = alertmanager(alerts=[am_alert(f"p{i}") for i in range(40)])
    raw = body(big)
    assert len(raw) > 4096
    response = client.post("/webhooks/alertmanager", content=raw, headers=JSON)
    assert response.status_code == 413
    assert response.json() == {
        "error": "payload_too_large",
        "detail": "the body is over the 4096-byte limit (PROFILER_WEBHOOK_MAX_BODY_BYTES)",
    }

    def chunks():  # no Content-Length: the limit holds while reading
        for i in range(0, len(raw), 1000):
            yield raw[i : i + 1000]

    streamed = client.post("/webhooks/alertmanager", content=chunks(), headers=JSON)
    assert streamed.status_code == 413
    assert client.get("/webhooks/alerts").json()["count"] == 0


@pytest.mark.parametrize(
    ("raw", "sentence"),
    [
        (b"{not json", "the body is not valid JSON: Expecting property name"),
        (b"", "the body is not valid JSON: Expecting value"),
        (b"\xff\xfe", "the body is not valid JSON"),
        (b"[1, 2]", "must be a JSON object with an 'alerts' list, not a list"),
        (b'{"version": "4"}', "alerts: Field required"),
        (b'{"alerts": [{"labels": "x"}]}', "alerts.0.labels"),
        (b'{"alerts": 3}', "alerts: Input should be a valid list"),
    ],
)
def test_malformed_bodies_get_400_with_a_sentence(client_for, raw, sentence):
    client = client_for()
    for path in ["/webhooks/grafana", "/webhooks/alertmanager"]:
        response = client.post(path, content=raw, headers=JSON)
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_payload"
        assert sentence in response.json()["detail"], response.json()


def test_openapi_documents_the_webhooks(client_for):
    paths = client_for().get("/openapi.json").json()["paths"]
    for path in ["/webhooks/grafana", "/webhooks/alertmanager", "/webhooks/alerts"]:
        assert path in paths
    responses = paths["/webhooks/alertmanager"]["post"]["responses"]
    assert {"202", "400", "401", "403", "413"} <= set(responses)


def test_the_fleet_hubs_token_is_accepted_and_stands_in_for_a_grafana_signature(client_for):
    """The hub (hub/routing.py) forwards with `Bearer <hub_token>`: it checked the sender's
    credentials and Grafana's signature itself, and the body it re-sends carries none."""
    client = client_for(
        webhook_token="am", webhook_hmac_secret=SECRET, hub_token="fleet", api_token="api"
    )
    raw = body(grafana())
    hub = {"Authorization": "Bearer fleet", **JSON}
    assert client.post("/webhooks/grafana", content=raw, headers=hub).status_code == 202
    assert (
        client.post("/webhooks/alertmanager", content=body(alertmanager()), headers=hub).status_code
        == 202
    )
    # Anyone else still signs, and the hub token is no signature for them.
    other = client.post("/webhooks/grafana", content=raw, headers={"Authorization": "Bearer am"})
    assert other.status_code == 401 and other.json()["error"] == "invalid_signature"
    wrong = client.post("/webhooks/grafana", content=raw, headers={"Authorization": "Bearer x"})
    assert wrong.status_code in (401, 403)
    # POST /profile takes it too (an operator's capture through the hub).
    assert client.post("/profile", headers={"Authorization": "Bearer fleet"}).status_code != 403
    assert client.post("/profile", headers={"Authorization": "Bearer nope"}).status_code == 403
