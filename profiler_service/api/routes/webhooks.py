"""Alert webhooks: POST `/webhooks/grafana` and `/webhooks/alertmanager`; GET `/webhooks/alerts`.

One receiver for a sidecar and the hub: what differs is the app's `AlertSink` (api/core.py), a
sidecar's `AlertTrigger` (capture here) or the hub's `FleetRouter` (route to a sidecar).

The decisions run on the event loop, not a worker thread: they are in-memory and take tens of
microseconds an alert (bench/bench_webhooks.py), and the thread hop cost more than they do under
a storm. The alert log appends from its own thread (trigger/alert_log.py). Only a decision to
capture touches the disk on the loop (the store records the new snapshot): at most once per
target at a time, and once per cooldown per alert.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ValidationError

from profiler_service.api.auth import check_signature, webhook_needs_signature
from profiler_service.api.core import AlertSink
from profiler_service.api.deps import AlertsDep, ReadReach, ReadRequired
from profiler_service.api.schemas import ErrorPublic
from profiler_service.config import AppSettings
from profiler_service.errors import InvalidPayload, PayloadTooLarge
from profiler_service.trigger.alert_log import MAX_RECORDS_IN_MEMORY, AlertOutcome
from profiler_service.trigger.webhook_payload import Source, WebhookPayload, WebhookResult

router = APIRouter(
    prefix="/webhooks",
    tags=["webhooks"],
    responses={code: {"model": ErrorPublic} for code in (400, 401, 403, 413)},
)

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object", "required": ["alerts"]}}},
    }
}


class AlertLogPublic(BaseModel):
    data: list[AlertOutcome]
    count: int
    counts: dict[str, dict[str, int]]  # source -> outcome -> alerts since start


@router.post("/grafana", status_code=202, response_model=WebhookResult, openapi_extra=_BODY_DOC)
async def receive_grafana_alerts(request: Request, alerts: AlertsDep) -> Response:
    """Take a Grafana alerting webhook; capture (a sidecar) or route (the hub) each alert.

    Answers what was done with each alert, in order.
    """
    return await receive(request, alerts, Source.GRAFANA)


@router.post(
    "/alertmanager", status_code=202, response_model=WebhookResult, openapi_extra=_BODY_DOC
)
async def receive_alertmanager_alerts(request: Request, alerts: AlertsDep) -> Response:
    """Take an Alertmanager webhook (version 4); capture or route each alert, answer per alert."""
    return await receive(request, alerts, Source.ALERTMANAGER)


async def receive(request: Request, alerts: AlertSink, source: Source) -> Response:
    """The one receiver: credentials (before the body), the body within its limit, Grafana's
    signature, the payload; then the sink decides each alert and the outcomes are recorded."""
    signing = webhook_needs_signature(request, source)
    body = await read_body(request, request.app.state.core.settings)
    if signing:
        check_signature(request, body, time.time())
    data = load_object(body)
    payload = validate_payload(data)
    outcomes = await alerts.outcomes(source, data, payload)
    result = WebhookResult.recorded(alerts.log, source, payload, outcomes)
    # Serialised once here: FastAPI would validate the model again before serialising it.
    return Response(result.model_dump_json(), status_code=202, media_type="application/json")


@router.get("/alerts", response_model=AlertLogPublic, dependencies=[ReadRequired])
def list_alert_outcomes(
    alerts: AlertsDep, reach: ReadReach, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> AlertLogPublic:
    """The newest webhook alerts and what was done with each, and the counts since start.

    A tenant's token sees the alerts of its namespaces only, counted over those the log keeps
    in memory.
    """
    if reach.everywhere:
        data, counted = alerts.log.recent(limit), alerts.log.counts()
    else:
        kept = reach.keep(alerts.log.recent(MAX_RECORDS_IN_MEMORY), lambda o: o.namespace)
        data, counted = kept[:limit], Counter((o.source, str(o.outcome)) for o in kept)
    counts: dict[str, dict[str, int]] = {}
    for (source, outcome), n in sorted(counted.items()):
        counts.setdefault(source, {})[outcome] = n
    return AlertLogPublic(data=data, count=len(data), counts=counts)


async def read_body(request: Request, settings: AppSettings) -> bytes:
    limit = settings.webhook.max_body_bytes
    too_large = f"the body is over the {limit}-byte limit (PROFILER_WEBHOOK_MAX_BODY_BYTES)"
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(too_large)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(too_large)
        chunks.append(chunk)
    return b"".join(chunks)


def load_object(body: bytes) -> dict:
    """The body as a JSON object (the hub forwards it, so the sink gets the raw form too)."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidPayload(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidPayload(
            f"the body must be a JSON object with an 'alerts' list, not a {type(data).__name__}"
        )
    return data


def validate_payload(data: dict) -> WebhookPayload:
    try:
        return WebhookPayload.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
            for err in exc.errors()[:5]
        ]
        raise InvalidPayload(
            "the body is not an alert webhook payload: " + "; ".join(problems)
        ) from None
