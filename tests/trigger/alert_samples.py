"""Webhook payloads as Grafana and Alertmanager send them.

GRAFANA is the example body of Grafana's webhook notifier documentation (unified alerting,
"Webhook JSON payload"), with its envelope fields; ALERTMANAGER follows the version 4 payload
of Alertmanager's webhook_config documentation, with the nanosecond timestamps Alertmanager's Go
encoder writes. Both are deep-copied by the helpers, so a test may change them freely.
"""

from __future__ import annotations

import copy
import json
from typing import Any

GRAFANA: dict[str, Any] = {
    "receiver": "My Super Webhook",
    "status": "firing",
    "orgId": 1,
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "High memory usage", "team": "blue", "zone": "us-1"},
            "annotations": {
                "description": "The system has high memory usage",
                "runbook_url": "https://myrunbook.com/runbook/1234",
                "summary": "This alert was triggered for zone us-1",
            },
            "startsAt": "2021-10-12T09:51:03.157076+02:00",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "https://play.grafana.org/alerting/1afz29v7z/edit",
            "fingerprint": "c6eadffa33fcdf37",
            "silenceURL": "https://play.grafana.org/alerting/silence/new?alertmanager=grafana"
            "&matchers=alertname%3DT2%2Cteam%3Dblue%2Czone%3Dus-1",
            "dashboardURL": "",
            "panelURL": "",
            "values": {"B": 44.23943737541908, "C": 1},
        },
        {
            "status": "firing",
            "labels": {"alertname": "High CPU usage", "team": "blue", "zone": "eu-1"},
            "annotations": {
                "description": "The system has high CPU usage",
                "runbook_url": "https://myrunbook.com/runbook/1234",
                "summary": "This alert was triggered for zone eu-1",
            },
            "startsAt": "2021-10-12T09:56:03.157076+02:00",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "https://play.grafana.org/alerting/d1rdpdv7k/edit",
            "fingerprint": "bc97ff14869b13e3",
            "silenceURL": "https://play.grafana.org/alerting/silence/new?alertmanager=grafana"
            "&matchers=alertname%3DT1%2Cteam%3Dblue%2Czone%3Deu-1",
            "dashboardURL": "https://play.grafana.org/d/mIJdaBpVk/training?orgId=1",
            "panelURL": "https://play.grafana.org/d/mIJdaBpVk/training?orgId=1&viewPanel=3",
            "values": {"B": 44.23943737541908, "C": 1},
        },
    ],
    "groupLabels": {},
    "commonLabels": {"team": "blue"},
    "commonAnnotations": {},
    "externalURL": "https://play.grafana.org/",
    "version": "1",
    "groupKey": "{}:{}",
    "truncatedAlerts": 0,
    "title": "[FIRING:2]  (blue)",
    "state": "alerting",
    "message": "**Firing**\n\nLabels:\n - alertname = T2\n - team = blue\n - zone = us-1\n",
}

ALERTMANAGER: dict[str, Any] = {
    "version": "4",
    "groupKey": '{}/{profile="true"}:{alertname="TrainingGpuUnderused"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "profiler-service",
    "groupLabels": {"alertname": "TrainingGpuUnderused"},
    "commonLabels": {"alertname": "TrainingGpuUnderused", "profile": "true"},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": "TrainingGpuUnderused",
                "namespace": "ml",
                "pod": "trainer-0",
                "profile": "true",
                "severity": "warning",
            },
            "annotations": {
                "summary": "GPU engine active 12% on ml/trainer-0",
                "profile_duration": "3s",
            },
            "startsAt": "2026-01-05T12:00:01.812345678Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=avg+by...&g0.tab=1",
            "fingerprint": "5a8c2f3b9d1e4f60",
        }
    ],
}


def grafana(**changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(GRAFANA), **changes}


def alertmanager(**changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(ALERTMANAGER), **changes}


def am_alert(
    pod: str = "trainer-0",
    *,
    status: str = "firing",
    fingerprint: str | None = None,
    **labels: str,
) -> dict[str, Any]:
    """One Alertmanager alert about `pod`; its fingerprint defaults to one per pod."""
    alert = copy.deepcopy(ALERTMANAGER["alerts"][0])
    alert["status"] = status
    alert["labels"].update(pod=pod, **labels)
    alert["fingerprint"] = fingerprint or f"fp-{pod}"
    return alert


def body(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()
