"""The alert webhooks' payloads, and what a webhook call answers: the vocabulary a sidecar's
alert trigger (alerts.py) and the hub's router (hub/routing.py) share, without the capture.

Two senders, one envelope. Alertmanager's webhook payload (version 4) is
`{version, groupKey, truncatedAlerts, status, receiver, groupLabels, commonLabels,
commonAnnotations, externalURL, alerts: [{status, labels, annotations, startsAt, endsAt,
generatorURL, fingerprint}]}`. Grafana's unified-alerting webhook contact point sends the same
envelope (version "1") plus `orgId`, `title`, `state`, `message`, and per alert `silenceURL`,
`dashboardURL`, `panelURL`, `imageURL`, `values` / `valueString`. Unknown fields are ignored.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from profiler_service.models import as_utc
from profiler_service.trigger.alert_log import AlertLog, AlertOutcome

__all__ = [
    "Source",
    "WebhookAlert",
    "WebhookPayload",
    "WebhookResult",
    "alert_fingerprint",
]


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
    return as_utc(parsed)


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
