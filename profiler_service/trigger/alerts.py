"""Alerts that ask for a capture: the webhook payloads, and what is done with each alert.

Two senders, one envelope. Alertmanager's webhook payload (version 4) is
`{version, groupKey, truncatedAlerts, status, receiver, groupLabels, commonLabels,
commonAnnotations, externalURL, alerts: [{status, labels, annotations, startsAt, endsAt,
generatorURL, fingerprint}]}`. Grafana's unified-alerting webhook contact point sends the same
envelope (version "1") plus `orgId`, `title`, `state`, `message`, and per alert `silenceURL`,
`dashboardURL`, `panelURL`, `imageURL`, `values` / `valueString`. Unknown fields are ignored.

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

import hashlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from profiler_service.capture.controller import CaptureController, CaptureRequest, StartOutcome
from profiler_service.config import AlertSettings
from profiler_service.durations import parse_duration
from profiler_service.errors import InvalidDuration
from profiler_service.models import Trigger, TriggerKind
from profiler_service.targets import TargetMatcher
from profiler_service.trigger.alert_log import AlertLog, AlertOutcome, Outcome, Reason

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


class Source(StrEnum):
    GRAFANA = "grafana"
    ALERTMANAGER = "alertmanager"


def _strings(value: Any) -> dict[str, str]:
    """Label and annotation maps: null becomes {}, scalar values become strings."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("must be an object of names to strings")
    return {str(k): v if isinstance(v, str) else str(v) for k, v in value.items()}


def _lenient_time(value: Any) -> datetime | None:
    """A timestamp that does not parse is dropped, not a reason to refuse the whole payload."""
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    if parsed.year <= 1:  # Go's zero time means "not set"
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


class WebhookAlert(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    status: str = "firing"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: datetime | None = Field(default=None, alias="startsAt")
    ends_at: datetime | None = Field(default=None, alias="endsAt")
    generator_url: str | None = Field(default=None, alias="generatorURL")
    fingerprint: str | None = None
    # Grafana only
    silence_url: str | None = Field(default=None, alias="silenceURL")
    dashboard_url: str | None = Field(default=None, alias="dashboardURL")
    panel_url: str | None = Field(default=None, alias="panelURL")

    @field_validator("labels", "annotations", mode="before")
    @classmethod
    def _maps(cls, value: Any) -> dict[str, str]:
        return _strings(value)

    @field_validator("starts_at", "ends_at", mode="before")
    @classmethod
    def _times(cls, value: Any) -> datetime | None:
        return _lenient_time(value)

    @field_validator(
        "generator_url", "fingerprint", "silence_url", "dashboard_url", "panel_url", mode="before"
    )
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @property
    def alertname(self) -> str | None:
        return self.labels.get("alertname")


class WebhookPayload(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    version: str | None = None
    receiver: str | None = None
    status: str | None = None
    group_key: str | None = Field(default=None, alias="groupKey")
    truncated_alerts: int = Field(default=0, ge=0, alias="truncatedAlerts")
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str | None = Field(default=None, alias="externalURL")
    alerts: list[WebhookAlert]
    # Grafana only
    org_id: int | None = Field(default=None, alias="orgId")
    title: str | None = None
    state: str | None = None

    @field_validator("group_labels", "common_labels", "common_annotations", mode="before")
    @classmethod
    def _maps(cls, value: Any) -> dict[str, str]:
        return _strings(value)

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return None if value is None else str(value)

    @field_validator("truncated_alerts", mode="before")
    @classmethod
    def _null_is_zero(cls, value: Any) -> Any:
        return 0 if value is None else value


class WebhookResult(BaseModel):
    source: str
    receiver: str | None = None
    received: int
    truncated_alerts: int = 0  # alerts the sender left out of the payload; counted, not seen
    counts: dict[str, int]
    alerts: list[AlertOutcome]

    @classmethod
    def recorded(
        cls, log: AlertLog, source: str, payload: WebhookPayload, outcomes: list[AlertOutcome]
    ) -> WebhookResult:
        """Record a payload's outcomes in the alert log and answer with them, counted."""
        if payload.truncated_alerts:
            logging.getLogger(__name__).warning(  # `log` is the alert log here
                "%s payload from receiver %r left out %d alerts (truncatedAlerts)",
                source,
                payload.receiver,
                payload.truncated_alerts,
            )
        log.record(source, outcomes, truncated=payload.truncated_alerts)
        return cls(
            source=source,
            receiver=payload.receiver,
            received=len(outcomes),
            truncated_alerts=payload.truncated_alerts,
            counts=dict(Counter(str(o.outcome) for o in outcomes)),
            alerts=outcomes,
        )


def alert_fingerprint(labels: dict[str, str]) -> str:
    """For alerts without one: 16 hex digits over the sorted labels (same labels, same print)."""
    text = "\xff".join(f"{k}\xfe{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class AlertTrigger:
    """Turns webhook alerts into captures; one lock makes every decision atomic under a storm."""

    def __init__(
        self,
        settings: AlertSettings,
        controller: CaptureController,
        alert_log: AlertLog,
        clock: Callable[[], float] = time.time,
    ):
        self.settings = settings
        self.controller = controller
        self.log = alert_log
        self._clock = clock
        self._lock = threading.Lock()
        self._matcher = TargetMatcher(
            settings.webhook_target_rules,
            settings.webhook_target_labels,
            settings.webhook_default_target,
        )
        self._target_names = controller.capture.target_names
        # fingerprint -> (epoch seconds, snapshot id) of its last capture; survives restarts.
        self._captured = alert_log.recent_captures(clock() - settings.webhook_cooldown_s)
        self._last_capture_s = max((t for t, _ in self._captured.values()), default=None)

    def handle(self, source: Source | str, payload: WebhookPayload) -> WebhookResult:
        """Decide every alert of one payload, record the outcomes, and say what was done."""
        source = Source(source)
        return WebhookResult.recorded(self.log, source, payload, self.decide(source, payload))

    def decide(self, source: Source, payload: WebhookPayload) -> list[AlertOutcome]:
        """Each alert's outcome, in order (capturing where the rules say so)."""
        return [self._decide(source, alert) for alert in payload.alerts]

    async def outcomes(
        self, source: Source, data: dict[str, Any], payload: WebhookPayload
    ) -> list[AlertOutcome]:
        """The webhook receiver's sink (api/core.py `AlertSink`): decided on the event loop."""
        return self.decide(source, payload)

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
        if last is not None and now - last[0] < s.webhook_cooldown_s:
            outcome.snapshot_id = last[1]
            detail = (
                f"this alert was captured {now - last[0]:.0f} s ago (snapshot {last[1]}); "
                f"its cooldown is {s.webhook_cooldown_s:g} s"
            )
            _set(outcome, Outcome.DEDUPLICATED, Reason.COOLDOWN, detail)
            return
        since_last = None if self._last_capture_s is None else now - self._last_capture_s
        if since_last is not None and since_last < s.webhook_min_interval_s:
            detail = (
                f"an alert capture started {since_last:.0f} s ago; alerts start at most one "
                f"capture every {s.webhook_min_interval_s:g} s"
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
        horizon = now - self.settings.webhook_cooldown_s
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
