"""Alerts that ask for a capture: what is done with each alert of a webhook's payload
(webhook_payload.py).

For every alert the decision is, in this order:

    resolved                     -> resolved      (recorded, never captured)
    no configured target matches -> rejected      (reason no_matching_target, saying what was tried)
    bad `profile_duration`       -> rejected      (reason invalid_duration, naming the range)
    fingerprint captured within the cooldown -> deduplicated
    an alert capture started within the global minimum interval -> throttled
    the target is being captured -> skipped_busy
    otherwise                    -> captured      (with the snapshot id)

The target comes only from configuration: explicit rules first (`label` fully matching a regex
names a target), then the listed labels whose value is a target's name, then the default target.
An address in a payload is never dialled.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from profiler_service.capture.controller import CaptureController, CaptureRequest, StartOutcome
from profiler_service.config import SidecarWebhookSettings
from profiler_service.durations import parse_duration
from profiler_service.errors import InvalidDuration
from profiler_service.models import Trigger, TriggerKind
from profiler_service.targets import TargetMatcher
from profiler_service.trigger.alert_log import TRUNCATED, AlertLog, AlertOutcome, Reason
from profiler_service.trigger.outcomes import Outcome
from profiler_service.trigger.plugin import TriggerParts, TriggerPlugin
from profiler_service.trigger.webhook_payload import (
    Source,
    WebhookAlert,
    WebhookPayload,
    WebhookResult,
    alert_fingerprint,
)

__all__ = [
    "AlertOutcome",
    "AlertTrigger",
    "Outcome",
    "Source",
    "WebhookAlert",
    "WebhookPayload",
    "WebhookResult",
    "alert_fingerprint",
]

log = logging.getLogger(__name__)

DURATION_KEY = "profile_duration"  # a label or annotation: 500ms, 5s, 2m, bare seconds
# Fingerprints remembered for dedupe: those of the last cooldown, at most this many (a storm).
_MAX_REMEMBERED_FINGERPRINTS = 10_000


class AlertTrigger:
    """Turns webhook alerts into captures; one lock makes every decision atomic under a storm."""

    def __init__(
        self,
        settings: SidecarWebhookSettings,
        controller: CaptureController,
        alert_log: AlertLog,
        clock: Callable[[], float] = time.time,
    ):
        self.settings = settings
        self.controller = controller
        self.log = alert_log
        self._clock = clock
        self._lock = threading.Lock()
        self._payload_lock = threading.Lock()  # one payload at a time, as on the event loop
        self._matcher = TargetMatcher(
            settings.target_rules,
            settings.target_labels,
            settings.default_target,
        )
        self._target_names = controller.capture.target_names
        # fingerprint -> (epoch seconds, snapshot id) of its last capture; survives restarts.
        self._captured = alert_log.recent_captures(clock() - settings.cooldown_s)
        self._last_capture_s = max((t for t, _ in self._captured.values()), default=None)

    # A trigger (trigger/plugin.py) with no life of its own: the webhook routes call it.
    def collect(self) -> Iterator[Metric]:
        """profiler_webhook_alerts_total{source, outcome}, from the alert log's counts."""
        alerts = CounterMetricFamily(
            "profiler_webhook_alerts",
            "Webhook alerts by source (grafana, alertmanager) and outcome (captured, "
            "deduplicated, skipped_busy, throttled, rejected, resolved; truncated: left out of "
            "a payload by its sender).",
            labels=["source", "outcome"],
        )
        counts = self.log.counts()
        # Every series from 0, so increase() sees the first alert of each kind.
        for source in Source:
            for outcome in [*Outcome, TRUNCATED]:
                alerts.add_metric([source, outcome], counts.get((source, outcome), 0))
        yield alerts

    def handle(self, source: Source | str, payload: WebhookPayload) -> WebhookResult:
        """Decide every alert of one payload, record the outcomes, and say what was done."""
        source = Source(source)
        return WebhookResult.recorded(self.log, source, payload, self.decide(source, payload))

    def decide(self, source: Source, payload: WebhookPayload) -> list[AlertOutcome]:
        """Each alert's outcome, in order (capturing where the rules say so); one payload's
        alerts are decided together, before or after another payload's."""
        with self._payload_lock:
            return [self._decide(source, alert) for alert in payload.alerts]

    async def outcomes(
        self, source: Source, data: dict[str, Any], payload: WebhookPayload
    ) -> list[AlertOutcome]:
        """The webhook receiver's sink (api/core.py `AlertSink`): decided on a worker thread,
        since a capture started writes its staging record (disk, SQLite): never on the loop."""
        return await asyncio.to_thread(self.decide, source, payload)

    def match_target(self, labels: dict[str, str]) -> tuple[str | None, str]:
        """The configured target an alert is about, and a sentence: how, or what was tried."""
        return self._matcher.match(labels, self._target_names)

    def _decide(self, source: Source, alert: WebhookAlert) -> AlertOutcome:
        fingerprint = alert.fingerprint or alert_fingerprint(alert.labels)
        outcome = AlertOutcome(
            source=source,
            alertname=alert.alertname,
            fingerprint=fingerprint,
            status=alert.status,
            outcome=Outcome.REJECTED,
            detail="",
            labels=alert.labels,
        )
        if alert.status == "resolved":
            return _set(outcome, Outcome.RESOLVED, None, "resolved: recorded, never captured")
        if alert.status != "firing":
            detail = f"status {alert.status!r} is neither firing nor resolved"
            return _set(outcome, Outcome.REJECTED, Reason.UNKNOWN_STATUS, detail)
        target, how = self.match_target(alert.labels)
        if target is None:
            return _set(outcome, Outcome.REJECTED, Reason.NO_MATCHING_TARGET, how)
        outcome.target = target
        s = self.controller.bounds
        raw = alert.labels.get(DURATION_KEY) or alert.annotations.get(DURATION_KEY)
        try:
            duration_s = parse_duration(
                raw, default_s=s.duration_default_s, min_s=s.duration_min_s, max_s=s.duration_max_s
            )
        except InvalidDuration as exc:
            return _set(
                outcome, Outcome.REJECTED, Reason.INVALID_DURATION, f"{DURATION_KEY}: {exc}"
            )
        request = CaptureRequest(
            duration_s=duration_s, target=target, trigger=_trigger(source, alert, fingerprint)
        )
        with self._lock:
            self._start_capture(outcome, request)
        if outcome.outcome is Outcome.CAPTURED:
            outcome.detail = f"capturing {target} for {duration_s:g} s ({how})"
        return outcome

    def _start_capture(self, outcome: AlertOutcome, request: CaptureRequest) -> None:
        """Cooldown, throttle, busy, start: called under the lock, so a storm cannot race it."""
        s = self.settings
        now = self._clock()
        last = self._captured.get(outcome.fingerprint)
        if last is not None and now - last[0] < s.cooldown_s:
            outcome.snapshot_id = last[1]
            detail = (
                f"this alert was captured {now - last[0]:.0f} s ago (snapshot {last[1]}); "
                f"its cooldown is {s.cooldown_s:g} s"
            )
            _set(outcome, Outcome.DEDUPLICATED, Reason.COOLDOWN, detail)
            return
        since_last = None if self._last_capture_s is None else now - self._last_capture_s
        if since_last is not None and since_last < s.min_interval_s:
            detail = (
                f"an alert capture started {since_last:.0f} s ago; alerts start at most one "
                f"capture every {s.min_interval_s:g} s"
            )
            _set(outcome, Outcome.THROTTLED, Reason.MIN_INTERVAL, detail)
            return
        result = self.controller.try_start(request)
        if result.outcome is StartOutcome.BUSY:
            _set(outcome, Outcome.SKIPPED_BUSY, result.error.code, result.error.detail)
            return
        if result.outcome is StartOutcome.REJECTED:
            _set(outcome, Outcome.REJECTED, result.error.code, result.error.detail)
            return
        self._remember(outcome.fingerprint, now, result.snapshot.id)
        outcome.snapshot_id = result.snapshot.id
        _set(outcome, Outcome.CAPTURED, None, "")

    def _remember(self, fingerprint: str, now: float, snapshot_id: str) -> None:
        """Kept oldest first, so what the cooldown no longer needs is dropped from the front:
        a sidecar remembers the alerts of one cooldown, not every alert it ever captured."""
        self._captured.pop(fingerprint, None)
        self._captured[fingerprint] = (now, snapshot_id)
        self._last_capture_s = now
        horizon = now - self.settings.cooldown_s
        while len(self._captured) > 1:
            oldest = next(iter(self._captured))
            if self._captured[oldest][0] >= horizon and (
                len(self._captured) <= _MAX_REMEMBERED_FINGERPRINTS
            ):
                break
            del self._captured[oldest]

    def close(self) -> None:
        self.log.close()


def _set(
    outcome: AlertOutcome, kind: Outcome, reason: Reason | str | None, detail: str
) -> AlertOutcome:
    outcome.outcome, outcome.reason, outcome.detail = kind, reason, detail
    return outcome


def _trigger(source: Source, alert: WebhookAlert, fingerprint: str) -> Trigger:
    return Trigger(
        kind=TriggerKind.WEBHOOK,
        source=f"{source}:{alert.alertname or 'unnamed alert'}",
        labels=alert.labels,
        annotations=alert.annotations,
        starts_at=alert.starts_at,
        fingerprint=fingerprint,
        generator_url=alert.generator_url,
        dashboard_url=alert.dashboard_url,
        panel_url=alert.panel_url,
    )


def _build(parts: TriggerParts[SidecarWebhookSettings]) -> AlertTrigger:
    """Always on: the webhook routes answer whether or not an alert rule points at them. Its
    log (STORE/webhooks/alerts.jsonl) is closed with the service."""
    log_path = parts.store.root / "webhooks" / "alerts.jsonl"
    trigger = AlertTrigger(parts.settings, parts.controller, AlertLog(log_path).open())
    parts.lifecycle.closing(trigger.close)
    return trigger


PLUGIN = TriggerPlugin(TriggerKind.WEBHOOK, SidecarWebhookSettings, _build)
