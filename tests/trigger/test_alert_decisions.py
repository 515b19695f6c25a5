"""What is done with each alert: captured, deduplicated, throttled, skipped_busy, rejected."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from alert_samples import alertmanager, am_alert, grafana
from fakes import FakeClock

from profiler_service.models import TriggerKind
from profiler_service.store import SnapshotQuery
from profiler_service.targets import TargetRule
from profiler_service.trigger.alert_log import AlertLog, AlertOutcome, Reason
from profiler_service.trigger.alerts import AlertTrigger, WebhookPayload


def trigger_for(service, clock=None, log=None) -> AlertTrigger:
    return AlertTrigger(
        service.settings.webhook, service.controller, log or AlertLog(None), clock or FakeClock()
    )


def payload(*alerts) -> WebhookPayload:
    return WebhookPayload.model_validate(alertmanager(alerts=list(alerts)))


def outcomes(result) -> list[str]:
    return [a.outcome for a in result.alerts]


def test_a_firing_alert_captures_its_target_and_the_snapshot_records_the_alert(make_service, held):
    service = make_service(
        webhook_target_rules=[TargetRule(label="pod", pattern=r"trainer-\d+", target="trainer")]
    )
    result = trigger_for(service).handle("alertmanager", payload(am_alert("trainer-0")))
    [alert] = result.alerts
    assert alert.outcome == "captured" and alert.target == "trainer"
    snapshot = service.store.get(alert.snapshot_id)
    assert snapshot.target == "trainer"
    assert snapshot.capture.duration_ms == 3000  # the rule's profile_duration annotation
    trigger = snapshot.trigger
    assert trigger.kind is TriggerKind.WEBHOOK
    assert trigger.source == "alertmanager:TrainingGpuUnderused"
    assert trigger.labels["pod"] == "trainer-0" and trigger.labels["namespace"] == "ml"
    assert trigger.annotations["profile_duration"] == "3s"
    assert trigger.fingerprint == "fp-trainer-0"
    assert trigger.starts_at.isoformat().startswith("2026-01-05T12:00:01.812345")
    assert trigger.generator_url.startswith("http://prometheus:9090/graph")


def test_grafana_alerts_keep_dashboard_and_panel_urls(make_service):
    service = make_service(webhook_min_interval_s=0, webhook_target_labels="zone")
    data = grafana()
    data["alerts"][1]["labels"]["zone"] = "serving"
    result = trigger_for(service).handle("grafana", WebhookPayload.model_validate(data))
    assert outcomes(result) == ["rejected", "captured"]
    assert result.alerts[0].reason == "no_matching_target"
    trigger = service.store.get(result.alerts[1].snapshot_id).trigger
    assert trigger.dashboard_url == "https://play.grafana.org/d/mIJdaBpVk/training?orgId=1"
    assert trigger.panel_url.endswith("viewPanel=3")
    assert trigger.fingerprint == "bc97ff14869b13e3"
    assert trigger.source == "grafana:High CPU usage"


def test_same_fingerprint_within_the_cooldown_is_deduplicated_then_captured_after(
    make_service, held
):
    service = make_service(
        targets="trainer=grpc://127.0.0.1:9", webhook_cooldown_s=600, webhook_min_interval_s=0
    )
    clock = FakeClock()
    alerts = trigger_for(service, clock)
    first = alerts.handle("alertmanager", payload(am_alert("trainer")))
    held.release()
    service.controller.wait(first.alerts[0].snapshot_id, 10)
    clock.advance(599)
    again = alerts.handle("alertmanager", payload(am_alert("trainer")))
    assert outcomes(again) == ["deduplicated"]
    assert again.alerts[0].reason == "cooldown"
    assert again.alerts[0].snapshot_id == first.alerts[0].snapshot_id
    assert "cooldown is 600 s" in again.alerts[0].detail
    clock.advance(2)
    assert outcomes(alerts.handle("alertmanager", payload(am_alert("trainer")))) == ["captured"]


def test_dedupe_remembers_the_alerts_of_one_cooldown_not_every_alert(make_service, held):
    """A sidecar that takes an alert a minute for months holds the last cooldown's
    fingerprints, not all of them (the soak's memory)."""
    service = make_service(
        targets="trainer=grpc://127.0.0.1:9", webhook_cooldown_s=600, webhook_min_interval_s=0
    )
    clock = FakeClock()
    alerts = trigger_for(service, clock)
    for n in range(30):
        result = alerts.handle("alertmanager", payload(am_alert("trainer", fingerprint=f"f{n}")))
        assert outcomes(result) == ["captured"]
        held.release()
        service.controller.wait(result.alerts[0].snapshot_id, 10)
        clock.advance(60)
    # Captured at 0, 60, ... 1740 s: at the last, those of the 600 s before it are kept.
    assert list(alerts._captured) == [f"f{n}" for n in range(19, 30)]
    again = alerts.handle("alertmanager", payload(am_alert("trainer", fingerprint="f29")))
    assert outcomes(again) == ["deduplicated"]


def test_alert_captures_are_throttled_globally(make_service, held):
    service = make_service(webhook_min_interval_s=60)
    clock = FakeClock()
    alerts = trigger_for(service, clock)
    result = alerts.handle("alertmanager", payload(am_alert("trainer"), am_alert("serving")))
    assert outcomes(result) == ["captured", "throttled"]
    assert result.alerts[1].reason == "min_interval"
    assert "one capture every 60 s" in result.alerts[1].detail
    clock.advance(61)
    assert outcomes(alerts.handle("alertmanager", payload(am_alert("serving")))) == ["captured"]


def test_a_target_being_captured_skips_other_alerts_about_it(make_service, held):
    service = make_service(webhook_min_interval_s=0)
    alerts = trigger_for(service)
    result = alerts.handle(
        "alertmanager",
        payload(am_alert("trainer", fingerprint="a"), am_alert("trainer", fingerprint="b")),
    )
    assert outcomes(result) == ["captured", "skipped_busy"]
    assert result.alerts[1].reason == "capture_in_progress"
    assert result.alerts[0].snapshot_id in result.alerts[1].detail


def test_unmatched_alerts_are_rejected_saying_what_was_tried(make_service):
    service = make_service(
        webhook_target_rules=[{"label": "pod", "pattern": "trainer-.*", "target": "trainer"}]
    )
    result = trigger_for(service).handle(
        "alertmanager", payload(am_alert("10.0.0.7:6009", job="db"))
    )
    [alert] = result.alerts
    assert alert.outcome == "rejected" and alert.reason == "no_matching_target"
    for part in ["pod='10.0.0.7:6009'", "job='db'", "trainer, serving", "pod~trainer-.*->trainer"]:
        assert part in alert.detail, part
    assert service.store.list(SnapshotQuery())[1] == 0


def test_the_default_target_takes_unmatched_alerts_when_configured(make_service):
    service = make_service(webhook_default_target="serving")
    [alert] = trigger_for(service).handle("alertmanager", payload(am_alert("nobody"))).alerts
    assert alert.outcome == "captured" and alert.target == "serving"


def test_profile_duration_is_bounded_like_post_profile(make_service):
    service = make_service(duration_max_s=10, webhook_min_interval_s=0)
    alerts = trigger_for(service)
    too_long = am_alert("trainer")
    too_long["annotations"]["profile_duration"] = "30s"
    label_wins = am_alert("serving", profile_duration="500ms")
    result = alerts.handle("alertmanager", payload(too_long, label_wins))
    assert outcomes(result) == ["rejected", "captured"]
    assert result.alerts[0].reason == "invalid_duration"
    assert "between 100ms and 10s" in result.alerts[0].detail
    assert service.store.get(result.alerts[1].snapshot_id).capture.duration_ms == 500


def test_resolved_alerts_are_recorded_not_captured(make_service):
    service = make_service()
    log = AlertLog(None)
    result = trigger_for(service, log=log).handle(
        "alertmanager", payload(am_alert("trainer", status="resolved"))
    )
    assert outcomes(result) == ["resolved"]
    assert service.controller.in_flight() == []
    assert log.counts() == {("alertmanager", "resolved"): 1}


def test_truncated_alerts_are_counted_not_hidden(make_service):
    service = make_service()
    log = AlertLog(None)
    data = alertmanager(truncatedAlerts=7)
    data["alerts"][0]["status"] = "resolved"
    result = trigger_for(service, log=log).handle(
        "alertmanager", WebhookPayload.model_validate(data)
    )
    assert result.truncated_alerts == 7
    assert log.counts()[("alertmanager", "truncated")] == 7


def test_a_storm_of_one_fingerprint_captures_exactly_once(make_service, held):
    service = make_service(webhook_min_interval_s=0)
    log = AlertLog(None)
    alerts = AlertTrigger(service.settings.webhook, service.controller, log)
    barrier = threading.Barrier(16)

    def post(_):
        barrier.wait()
        return (
            alerts.handle("alertmanager", payload(am_alert("trainer", fingerprint="same")))
            .alerts[0]
            .outcome
        )

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(post, range(16)))
    assert results.count("captured") == 1
    assert results.count("deduplicated") == 15
    assert log.counts() == {("alertmanager", "captured"): 1, ("alertmanager", "deduplicated"): 15}


def test_dedupe_survives_a_restart_through_the_persisted_log(make_service, held, tmp_path):
    service = make_service(webhook_min_interval_s=0)
    path = tmp_path / "alerts.jsonl"
    first = AlertTrigger(service.settings.webhook, service.controller, AlertLog(path).open())
    captured = first.handle("alertmanager", payload(am_alert("trainer"))).alerts[0]
    first.close()
    held.release()
    service.controller.wait(captured.snapshot_id, 10)
    restarted = AlertTrigger(service.settings.webhook, service.controller, AlertLog(path).open())
    [again] = restarted.handle("alertmanager", payload(am_alert("trainer"))).alerts
    assert again.outcome == "deduplicated" and again.snapshot_id == captured.snapshot_id
    restarted.close()
    lines = path.read_text().splitlines()
    assert [line.count('"outcome":"captured"') for line in lines] == [1, 0]


def test_the_alert_log_is_bounded_in_memory_and_on_disk(tmp_path, make_service):
    service = make_service(webhook_min_interval_s=0)
    path = tmp_path / "alerts.jsonl"
    log = AlertLog(path, max_records=50, max_file_bytes=20_000).open()
    alerts = trigger_for(service, log=log)
    for i in range(200):
        alerts.handle("alertmanager", payload(am_alert(f"x{i}", status="resolved")))
    assert len(log.recent(1000)) == 50
    assert log.recent(1)[0].labels["pod"] == "x199"
    assert log.counts()[("alertmanager", "resolved")] == 200
    assert log.flush()  # the writer thread appended every line
    assert path.stat().st_size <= 20_000
    assert path.with_name("alerts.jsonl.1").stat().st_size <= 20_000
    log.close()


def test_reasons_are_the_enum_and_keep_their_stored_values(make_service, tmp_path):
    """alerts.jsonl holds the plain values; read back they are the enum again, and a reason this
    version does not know (a newer sidecar's, relayed by the hub) is kept as it is."""
    service = make_service(
        webhook_target_rules=[{"label": "pod", "pattern": "trainer-.*", "target": "trainer"}]
    )
    path = tmp_path / "alerts.jsonl"
    trigger = trigger_for(service, log=AlertLog(path).open())
    result = trigger.handle("alertmanager", payload(am_alert("10.0.0.7:6009", job="db")))
    assert result.alerts[0].reason is Reason.NO_MATCHING_TARGET
    trigger.close()
    assert '"reason":"no_matching_target"' in path.read_text()
    (read_back,) = AlertLog(path).open().recent()
    assert read_back.reason is Reason.NO_MATCHING_TARGET
    relayed = AlertOutcome.model_validate({**read_back.model_dump(), "reason": "a_newer_reason"})
    assert relayed.reason == "a_newer_reason"
