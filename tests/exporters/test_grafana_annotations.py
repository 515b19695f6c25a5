"""Grafana annotations for finished captures, against a loopback stand-in of Grafana's HTTP API.

Grafana cannot run here, so `grafana_standin.GrafanaStandIn` plays it: it checks the method,
path, Authorization header and body of every request against Grafana's documented
`POST /api/annotations` and answers as Grafana does (or fails as scripted, to play it down).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from fakes import FailingCapturer
from grafana_standin import GrafanaStandIn
from helpers import wait_until

from profiler_service.capture.controller import CaptureRequest
from profiler_service.exporters.grafana import (
    BACKOFF_FIRST_S,
    BACKOFF_MAX_S,
    GrafanaAnnotator,
    annotation_for,
)
from profiler_service.models import Snapshot
from profiler_service.trigger.alerts import WebhookPayload

TOKEN = "glsa_standin_token"
T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def grafana():
    standin = GrafanaStandIn(token=TOKEN)
    yield standin
    standin.close()


def ready_snapshot(**changes) -> Snapshot:
    data = {
        "id": "20260105-120000-trainer-abc123",
        "status": "ready",
        "target": "trainer",
        "capture": {
            "duration_ms": 3000,
            "host_tracer_level": 2,
            "python_tracer_level": 0,
            "device_tracer_level": 1,
        },
        "created_at": T0,
        "capture_started_at": datetime(2026, 1, 5, 12, 0, 1, tzinfo=UTC),
        "capture_finished_at": datetime(2026, 1, 5, 12, 0, 4, 500000, tzinfo=UTC),
        "trigger": {
            "kind": "webhook",
            "labels": {"alertname": "High CPU usage", "zone": "trainer"},
            "dashboard_url": "https://grafana.example/d/mIJdaBpVk/training?orgId=1",
            "panel_url": "https://grafana.example/d/mIJdaBpVk/training?orgId=1&viewPanel=3",
        },
        "findings": [
            {"rule": "host_overhead", "severity": "warning", "title": "Host overhead"},
            {"rule": "input_bound", "severity": "critical", "title": "Input-bound: 97% waiting"},
        ],
    }
    data.update(changes)
    return Snapshot.model_validate(data)


def annotator_for(grafana: GrafanaStandIn, **kwargs) -> GrafanaAnnotator:
    kwargs.setdefault("token", TOKEN)
    kwargs.setdefault("backoff_s", 0.01)
    annotator = GrafanaAnnotator(grafana.url, public_url="https://profiler.example", **kwargs)
    annotator.start()
    return annotator


def test_an_annotation_follows_grafanas_documented_api(grafana):
    annotator = annotator_for(grafana)
    annotator.on_finished(ready_snapshot())
    assert annotator.drain(10)
    annotator.stop()
    assert grafana.problems == []
    [request] = grafana.received
    assert request.method == "POST" and request.path == "/api/annotations"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.body == {
        "dashboardUID": "mIJdaBpVk",
        "panelId": 3,
        "time": 1767614401000,
        "timeEnd": 1767614404500,
        "tags": [
            "profiler-service",
            "target:trainer",
            "status:ready",
            "alert:High CPU usage",
            "finding:input_bound",  # the most severe finding, not the first listed
        ],
        "text": "Profile of trainer (3000 ms): Input-bound: 97% waiting. "
        '<a href="https://profiler.example/profiles/20260105-120000-trainer-abc123/report">'
        "Report for snapshot 20260105-120000-trainer-abc123</a>",
    }
    assert annotator.counts() == {"sent": 1, "failed": 0, "retried": 0, "dropped": 0}


@pytest.mark.parametrize(
    ("trigger", "dashboard", "panel"),
    [
        ({"panel_url": "https://g/d/abc/x?viewPanel=panel-7"}, "abc", 7),
        ({"annotations": {"dashboard_uid": "rules-uid", "panel_id": "12"}}, "rules-uid", 12),
        ({"annotations": {"__dashboardUid__": "u1", "__panelId__": "2"}}, "u1", 2),
        ({"dashboard_url": "https://g/d/only-dash/x"}, "only-dash", None),
        ({}, None, None),
    ],
)
def test_dashboard_and_panel_come_from_the_alert(trigger, dashboard, panel):
    body = annotation_for(ready_snapshot(trigger={"kind": "webhook", **trigger}), None)
    assert body.get("dashboardUID") == dashboard
    assert body.get("panelId") == panel
    if dashboard is None:
        assert "dashboardUID" not in body and "panelId" not in body  # organisation-wide


def test_a_failed_capture_is_annotated_with_its_error_and_no_finding_tag():
    snapshot = ready_snapshot(
        status="failed",
        findings=[],
        error={"code": "target_unreachable", "detail": "nothing listens at 10.0.0.1:6009"},
    )
    body = annotation_for(snapshot, None)
    assert "status:failed" in body["tags"]
    assert not any(t.startswith("finding:") for t in body["tags"])
    assert "capture failed: target_unreachable" in body["text"]
    assert 'href="/profiles/20260105-120000-trainer-abc123/report"' in body["text"]


def test_grafana_errors_are_retried_a_bounded_number_of_times(grafana):
    grafana.script = [503, 502]
    annotator = annotator_for(grafana, attempts=3)
    annotator.on_finished(ready_snapshot())
    assert annotator.drain(10)
    assert len(grafana.received) == 3
    assert annotator.counts() == {"sent": 1, "failed": 0, "retried": 2, "dropped": 0}
    grafana.script = [503] * 10
    annotator.on_finished(ready_snapshot())
    assert annotator.drain(10)
    annotator.stop()
    assert len(grafana.received) == 6  # three more attempts, then it gives up
    assert annotator.counts() == {"sent": 1, "failed": 1, "retried": 4, "dropped": 0}


def test_a_refused_token_is_not_retried(grafana):
    annotator = annotator_for(grafana, token="wrong", attempts=5)
    annotator.on_finished(ready_snapshot())
    assert annotator.drain(10)
    annotator.stop()
    assert len(grafana.received) == 1
    assert annotator.counts()["failed"] == 1


def test_the_pause_before_each_retry_doubles_up_to_its_most(grafana):
    pauses: list[float] = []
    grafana.script = [503] * 10
    annotator = annotator_for(
        grafana, attempts=8, backoff_s=BACKOFF_FIRST_S, wait=lambda s: pauses.append(s) or False
    )
    annotator.on_finished(ready_snapshot())
    assert annotator.drain(10)
    annotator.stop()
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, BACKOFF_MAX_S, BACKOFF_MAX_S]
    assert len(grafana.received) == 8
    assert annotator.counts() == {"sent": 0, "failed": 1, "retried": 7, "dropped": 0}


def test_a_pause_cut_short_by_stopping_ends_the_retries(grafana):
    grafana.script = [503] * 10
    annotator = annotator_for(grafana, attempts=5, wait=lambda s: True)  # as stop() cuts it
    annotator.on_finished(ready_snapshot())
    assert annotator.drain(10)
    annotator.stop()
    assert len(grafana.received) == 1  # no attempt after the cut
    assert annotator.counts() == {"sent": 0, "failed": 1, "retried": 1, "dropped": 0}


def test_grafana_hung_or_down_never_fails_or_delays_a_capture(make_service, grafana):
    grafana.hold()  # it takes the annotation's request and answers nothing, until released
    grafana.script = [503, 503]  # then it is down: every attempt fails
    service = make_service(
        FailingCapturer(),
        start=True,
        targets="trainer=grpc://127.0.0.1:9",
        grafana_url=grafana.url,
        grafana_token=TOKEN,
        grafana_annotation_attempts=2,
        grafana_timeout_s=60,
    )
    snapshot = service.controller.start(CaptureRequest(duration_s=1, target="trainer"))
    # The capture finishes while its annotation cannot have: nothing of it waits on Grafana.
    assert service.controller.wait(snapshot.id, 10)
    assert service.store.get(snapshot.id).error.code == "target_unreachable"  # its own error
    wait_until(lambda: grafana.received, 10, "the annotation's request at Grafana")
    assert service.annotator.counts() == {"sent": 0, "failed": 0, "retried": 0, "dropped": 0}
    grafana.release()
    assert service.annotator.drain(20)
    assert service.annotator.counts() == {"sent": 0, "failed": 1, "retried": 1, "dropped": 0}
    assert service.store.get(snapshot.id).error.code == "target_unreachable"


def test_an_alert_capture_is_annotated_on_the_alerts_panel(make_service, grafana):
    service = make_service(
        FailingCapturer(),
        start=True,
        targets="trainer=grpc://127.0.0.1:9",
        webhook_target_labels="zone",
        grafana_url=grafana.url,
        grafana_token=TOKEN,
        public_url="http://profiler.example:8080/",
    )
    payload = {
        "receiver": "profiler",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "Step time high", "zone": "trainer"},
                "fingerprint": "bc97ff14869b13e3",
                "panelURL": "https://grafana.example/d/mIJdaBpVk/t?orgId=1&viewPanel=3",
            }
        ],
    }
    result = service.alerts.handle("grafana", WebhookPayload.model_validate(payload))
    snapshot_id = result.alerts[0].snapshot_id
    assert service.controller.wait(snapshot_id, 10)
    assert service.annotator.drain(10)
    [body] = grafana.annotations()
    assert body["dashboardUID"] == "mIJdaBpVk" and body["panelId"] == 3
    assert "alert:Step time high" in body["tags"]
    assert f"http://profiler.example:8080/profiles/{snapshot_id}/report" in body["text"]


def test_a_full_queue_drops_and_counts(grafana):
    gate = threading.Event()
    annotator = annotator_for(grafana, queue_size=2)
    annotator._post = lambda snapshot: gate.wait(10)  # hold the worker on the first annotation
    for _ in range(5):
        annotator.on_finished(ready_snapshot())
    gate.set()
    assert annotator.drain(10)
    annotator.stop()
    assert annotator.counts()["dropped"] >= 2
