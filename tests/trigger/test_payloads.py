"""Grafana's and Alertmanager's webhook payloads, read as their documentation shows them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from alert_samples import ALERTMANAGER, GRAFANA, alertmanager, grafana
from pydantic import ValidationError

from profiler_service.config import Settings
from profiler_service.trigger.alerts import WebhookPayload, alert_fingerprint


def test_grafana_documented_payload():
    payload = WebhookPayload.model_validate(GRAFANA)
    assert payload.receiver == "My Super Webhook" and payload.status == "firing"
    assert payload.org_id == 1 and payload.state == "alerting" and payload.version == "1"
    assert payload.title == "[FIRING:2]  (blue)"
    assert payload.common_labels == {"team": "blue"}
    assert payload.external_url == "https://play.grafana.org/"
    first, second = payload.alerts
    assert first.labels == {"alertname": "High memory usage", "team": "blue", "zone": "us-1"}
    assert first.annotations["runbook_url"] == "https://myrunbook.com/runbook/1234"
    assert first.alertname == "High memory usage"
    # +02:00 in the payload, kept as the same instant in UTC.
    assert first.starts_at == datetime(2021, 10, 12, 7, 51, 3, 157076, tzinfo=UTC)
    assert first.ends_at is None  # Go's zero time: not set
    assert first.fingerprint == "c6eadffa33fcdf37"
    assert first.generator_url == "https://play.grafana.org/alerting/1afz29v7z/edit"
    assert first.silence_url.startswith("https://play.grafana.org/alerting/silence/new?")
    assert first.dashboard_url is None and first.panel_url is None  # "" means none
    assert second.panel_url == "https://play.grafana.org/d/mIJdaBpVk/training?orgId=1&viewPanel=3"


def test_alertmanager_version_4_payload():
    payload = WebhookPayload.model_validate(ALERTMANAGER)
    assert payload.version == "4"
    assert payload.group_key == '{}/{profile="true"}:{alertname="TrainingGpuUnderused"}'
    assert payload.truncated_alerts == 0 and payload.receiver == "profiler-service"
    assert payload.group_labels == {"alertname": "TrainingGpuUnderused"}
    [alert] = payload.alerts
    assert alert.status == "firing" and alert.labels["pod"] == "trainer-0"
    # Alertmanager writes nanoseconds; Python keeps microseconds.
    assert alert.starts_at == datetime(2026, 1, 5, 12, 0, 1, 812345, tzinfo=UTC)
    assert alert.generator_url.startswith("http://prometheus:9090/graph")
    assert alert.dashboard_url is None  # Grafana-only fields are simply absent


def test_unknown_fields_nulls_and_odd_values_are_tolerated():
    data = grafana(newEnvelopeField=[1], truncatedAlerts=None, commonLabels=None, version=1)
    alert = data["alerts"][0]
    alert.update(
        someFutureField={"a": 1},
        labels={"alertname": "x", "replicas": 3, "ratio": 0.5, "on": True},
        annotations=None,
        startsAt="not a time",
        imageURL="https://grafana/render.png",
    )
    payload = WebhookPayload.model_validate(data)
    assert payload.truncated_alerts == 0 and payload.common_labels == {} and payload.version == "1"
    first = payload.alerts[0]
    assert first.labels == {"alertname": "x", "replicas": "3", "ratio": "0.5", "on": "True"}
    assert first.annotations == {} and first.starts_at is None


def test_naive_timestamps_are_read_as_utc():
    data = alertmanager()
    data["alerts"][0]["startsAt"] = "2026-01-05T12:00:00"
    [alert] = WebhookPayload.model_validate(data).alerts
    assert alert.starts_at == datetime(2026, 1, 5, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    "data",
    [{}, {"alerts": None}, {"alerts": [{"labels": ["a"]}]}, {"alerts": [], "truncatedAlerts": -1}],
)
def test_what_is_not_a_webhook_payload_is_refused(data):
    with pytest.raises(ValidationError):
        WebhookPayload.model_validate(data)


def test_a_missing_fingerprint_is_derived_from_the_labels_stably():
    a = alert_fingerprint({"alertname": "A", "pod": "p"})
    assert a == alert_fingerprint({"pod": "p", "alertname": "A"})
    assert a != alert_fingerprint({"alertname": "A", "pod": "q"})
    assert a != alert_fingerprint({"alertname": "Ap", "pod": ""})  # no ambiguity from joining
    assert len(a) == 16


def test_webhook_settings_are_checked_at_start(monkeypatch):
    base = {"targets": "trainer=grpc://127.0.0.1:9"}
    with pytest.raises(ValidationError, match="names target 'nope', which is not configured"):
        Settings(**base, webhook_target_rules=[{"label": "pod", "pattern": ".*", "target": "nope"}])
    with pytest.raises(ValidationError, match="not a regular expression"):
        Settings(
            **base, webhook_target_rules=[{"label": "pod", "pattern": "(", "target": "trainer"}]
        )
    with pytest.raises(ValidationError, match="webhook_default_target names target 'x'"):
        Settings(**base, webhook_default_target="x")
    with pytest.raises(ValidationError, match="set both"):
        Settings(**base, webhook_username="am")
    monkeypatch.setenv("PROFILER_WEBHOOK_TARGET_LABELS", "pod, job")
    monkeypatch.setenv(
        "PROFILER_WEBHOOK_TARGET_RULES",
        '[{"label": "instance", "pattern": "10\\\\.0\\\\.0\\\\.5:.*", "target": "trainer"}]',
    )
    settings = Settings(**base).webhook
    assert settings.target_labels == ["pod", "job"]
    assert settings.target_rules[0].pattern == r"10\.0\.0\.5:.*"
    assert settings.cooldown_s == 600 and settings.min_interval_s == 60
    assert settings.hmac_header == "X-Grafana-Alerting-Signature"
