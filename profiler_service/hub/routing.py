"""Alerts and operator captures, routed to the registered sidecar they name.

For each alert of a webhook payload, among the live sidecars (of the alert's `namespace` label,
when it has one):

    the alert's `pod` label is a sidecar's pod      -> that sidecar
    the sidecar's own rules name a target            -> the one sidecar that captures it
      (webhook_target_rules, webhook_target_labels, webhook_default_target: targets.TargetMatcher)
    several sidecars capture that target             -> no_sidecar (ambiguous_target), naming them
    nothing matches                                  -> no_sidecar (no_matching_sidecar)

Matched alerts are forwarded, one request per sidecar, as the same webhook payload with only that
sidecar's alerts, each labelled `profile_target=<target>`, with `Bearer <hub_token>`. The sidecar
applies its own bounds (cooldown, one capture at a time, dedupe) and answers per alert; the hub
passes that on. A sidecar that does not answer, or answers an error: `sidecar_unreachable`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from profiler_service.config import BoundsSettings, FleetSettings, WebhookSettings
from profiler_service.errors import Failed, ServiceError
from profiler_service.hub.registry import SidecarRegistry
from profiler_service.sidecar_record import SidecarRecord
from profiler_service.targets import TargetMatcher
from profiler_service.trigger.alert_log import AlertLog, AlertOutcome, Reason
from profiler_service.trigger.outcomes import Outcome
from profiler_service.trigger.webhook_payload import (
    Source,
    WebhookAlert,
    WebhookPayload,
    WebhookResult,
    alert_fingerprint,
)

__all__ = ["FleetRouter", "NoSidecar", "SidecarUnreachable", "read_answer", "webhook_url"]

log = logging.getLogger(__name__)

TARGET_LABEL = "profile_target"  # the first of the sidecar's default webhook_target_labels


class NoSidecar(ServiceError):
    """The hub: no live sidecar captures the target asked for, or several do (name the pod or
    the namespace)."""

    code = "no_sidecar"
    status_code = 404


class SidecarUnreachable(ServiceError):
    """The hub: the sidecar it forwarded to did not answer in `hub_forward_timeout_s`."""

    code = "sidecar_unreachable"
    status_code = 502


@dataclass(frozen=True, slots=True)
class Match:
    sidecar: SidecarRecord | None
    target: str | None
    how: str  # how it matched, or why nothing did
    reason: Reason | None  # None when matched; else no_matching_sidecar or ambiguous_target


class FleetRouter:
    """The hub's routing of alerts and capture requests: `fleet` its timeout, `webhook` which
    target an alert names, `bounds` how long a capture waited on may take, `hub_token` what it
    shows a sidecar (the server's)."""

    def __init__(
        self,
        fleet: FleetSettings,
        webhook: WebhookSettings,
        bounds: BoundsSettings,
        hub_token: SecretStr | None,
        registry: SidecarRegistry,
        alert_log: AlertLog,
    ):
        self.fleet, self.bounds, self.hub_token = fleet, bounds, hub_token
        self.registry = registry
        self.log = alert_log
        self.matcher = TargetMatcher(
            webhook.target_rules,
            webhook.target_labels,
            webhook.default_target,
        )
        self._client: httpx.AsyncClient | None = None

    # ---- which sidecar ----------------------------------------------------------------------

    def match(
        self,
        labels: dict[str, str],
        sidecars: Iterable[SidecarRecord] | None = None,
        *,
        target: str | None = None,
    ) -> Match:
        """The sidecar (and its target) that `labels` name, or why none does."""
        namespace = labels.get("namespace")
        candidates = [
            s
            for s in (self.registry.live() if sidecars is None else sidecars)
            if namespace is None or s.namespace in (None, namespace)
        ]
        where = f" in namespace {namespace!r}" if namespace else ""
        pod = labels.get("pod")
        if target is None and pod is not None:
            by_pod = [s for s in candidates if pod in (s.pod, s.name)]
            if len(by_pod) == 1:
                sidecar = by_pod[0]
                found, how = self.matcher.match(labels, sidecar.targets)
                if found is None or not sidecar.captures(found):
                    found, how = (sidecar.targets or [None])[0], "the pod's first target"
                return Match(sidecar, found, f"label pod={pod!r} is {sidecar.key}; {how}", None)
        known = sorted({t for s in candidates for t in s.targets})
        if target is None:
            target, how = self.matcher.match(labels, known)
        else:
            how = f"target {target!r} asked for"
        owners = [s for s in candidates if target is not None and s.captures(target)]
        if pod is not None and len(owners) > 1:
            owners = [s for s in owners if pod in (s.pod, s.name)] or owners
        if len(owners) == 1:
            return Match(owners[0], target, how, None)
        if owners:
            names = ", ".join(s.key for s in owners)
            return Match(
                None,
                target,
                f"{len(owners)} sidecars{where} capture target {target!r} ({names}): name the "
                "pod or the namespace in the alert's labels",
                Reason.AMBIGUOUS_TARGET,
            )
        live = len(candidates)
        if target is None:
            how = f"{how}; {live} live sidecar(s){where}"
            return Match(None, None, how, Reason.NO_MATCHING_SIDECAR)
        return Match(
            None,
            target,
            f"no live sidecar{where} captures target {target!r} ({how}; {live} live)",
            Reason.NO_MATCHING_SIDECAR,
        )

    # ---- webhooks ---------------------------------------------------------------------------

    async def outcomes(
        self, source: Source, data: dict[str, Any], payload: WebhookPayload
    ) -> list[AlertOutcome]:
        """The webhook receiver's sink (api/core.py `AlertSink`): route every alert of one
        payload, forwarding each sidecar's share in one request; each alert's outcome."""
        sidecars = self.registry.live()
        outcomes: list[AlertOutcome] = []
        shares: dict[str, tuple[SidecarRecord, list[int], list[dict]]] = {}
        raw_alerts = data.get("alerts") or []
        for i, alert in enumerate(payload.alerts):
            outcome = _outcome(source, alert)
            outcomes.append(outcome)
            found = self.match(alert.labels, sidecars)
            if found.sidecar is None:
                if alert.status == "resolved":
                    outcome.outcome, outcome.detail = Outcome.RESOLVED, "resolved: recorded"
                else:
                    outcome.outcome, outcome.reason = Outcome.NO_SIDECAR, found.reason
                    outcome.detail, outcome.target = found.how, found.target
                continue
            raw = dict(raw_alerts[i]) if isinstance(raw_alerts[i], dict) else {}
            raw["labels"] = {**alert.labels, TARGET_LABEL: found.target}
            raw.setdefault("fingerprint", outcome.fingerprint)
            outcome.target, outcome.sidecar = found.target, found.sidecar.key
            share = shares.setdefault(found.sidecar.key, (found.sidecar, [], []))
            share[1].append(i)
            share[2].append(raw)
        envelope = {k: v for k, v in data.items() if k != "alerts"}
        answers = await asyncio.gather(
            *(
                self._forward_alerts(source, sidecar, {**envelope, "alerts": alerts})
                for sidecar, _, alerts in shares.values()
            )
        )
        for (_, indexes, _), answer in zip(shares.values(), answers, strict=True):
            for n, i in enumerate(indexes):
                outcome = outcomes[i]
                if isinstance(answer, Failed):
                    outcome.outcome, outcome.reason = Outcome.SIDECAR_UNREACHABLE, Reason.NO_ANSWER
                    outcome.detail = answer.reason
                    continue
                theirs = answer[n]
                outcome.outcome, outcome.reason = theirs.outcome, theirs.reason
                outcome.detail, outcome.snapshot_id = theirs.detail, theirs.snapshot_id
                outcome.target = theirs.target or outcome.target
        return outcomes

    async def _forward_alerts(
        self, source: Source, sidecar: SidecarRecord, body: dict[str, Any]
    ) -> list[AlertOutcome] | Failed:
        """The sidecar's outcome for each alert sent, or why there is none."""
        try:
            response = await self.client.post(
                webhook_url(sidecar, source), json=body, headers=self.auth_headers()
            )
        except httpx.HTTPError as exc:
            return unanswered(sidecar, exc)
        return read_answer(sidecar, response, len(body["alerts"]))

    # ---- operator captures ------------------------------------------------------------------

    async def forward_profile(
        self,
        query: list[tuple[str, str]],
        target: str,
        namespace: str | None,
        pod: str | None,
        wait: bool,
        sidecars: Iterable[SidecarRecord] | None = None,
    ) -> tuple[SidecarRecord, httpx.Response]:
        """`POST /profile` on the sidecar that captures `target` (narrowed by namespace/pod),
        among `sidecars` (the live ones the caller may capture; default: every live one)."""
        labels = {k: v for k, v in (("namespace", namespace), ("pod", pod)) if v}
        found = self.match(labels, sidecars, target=target)
        if found.sidecar is None:
            raise NoSidecar(found.how, reason=found.reason)
        b = self.bounds
        timeout = self.fleet.forward_timeout_s
        if wait:  # the sidecar answers once the snapshot is analysed
            timeout += b.duration_max_s + b.capture_grace_s + b.analysis_timeout_s
        url = f"{found.sidecar.url.rstrip('/')}/profile"
        try:
            response = await self.client.post(
                url, params=query, headers=self.auth_headers(), timeout=timeout
            )
        except httpx.HTTPError as exc:
            raise SidecarUnreachable(
                f"sidecar {found.sidecar.key} at {found.sidecar.url} did not answer: "
                f"{type(exc).__name__}",
                sidecar=found.sidecar.key,
            ) from None
        return found.sidecar, response

    # ---- the connection pool ----------------------------------------------------------------

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.fleet.forward_timeout_s,
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=100),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def auth_headers(self) -> dict[str, str]:
        """What the hub sends a sidecar: its hub token, which sidecars accept."""
        token = self.hub_token
        return {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}


def webhook_url(sidecar: SidecarRecord, source: Source) -> str:
    return f"{sidecar.url.rstrip('/')}/webhooks/{source}"


def unanswered(sidecar: SidecarRecord, exc: Exception) -> Failed:
    log.warning("sidecar %s at %s did not answer: %s", sidecar.key, sidecar.url, exc)
    return Failed(f"sidecar {sidecar.key} at {sidecar.url} did not answer: {type(exc).__name__}")


def read_answer(
    sidecar: SidecarRecord, response: httpx.Response, sent: int
) -> list[AlertOutcome] | Failed:
    """The sidecar's outcome for each of the `sent` alerts of a forwarded payload, or why there
    is none (an error status, a body that is not a webhook result, a count that differs)."""
    if response.status_code != 202:
        return Failed(
            f"sidecar {sidecar.key} answered {response.status_code}: {response.text[:300]}"
        )
    try:
        result = WebhookResult.model_validate_json(response.content)
    except ValueError:
        return Failed(f"sidecar {sidecar.key} answered something that is not a webhook result")
    if len(result.alerts) != sent:
        return Failed(f"sidecar {sidecar.key} answered for {len(result.alerts)} of {sent} alerts")
    return result.alerts


def _outcome(source: Source, alert: WebhookAlert) -> AlertOutcome:
    return AlertOutcome(
        source=source,
        alertname=alert.alertname,
        fingerprint=alert.fingerprint or alert_fingerprint(alert.labels),
        status=alert.status,
        outcome=Outcome.REJECTED,
        detail="",
        labels=alert.labels,
    )
