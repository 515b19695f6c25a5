"""Alert webhooks: POST `/webhooks/grafana` and `/webhooks/alertmanager`; GET `/webhooks/alerts`.

The decisions run on the event loop, not a worker thread: they are in-memory and take tens of
microseconds an alert (bench/bench_webhooks.py), and the thread hop cost more than they do under
a storm. Only a decision to capture touches the disk (the store records the new snapshot), at most
once per target at a time.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import BaseModel, ValidationError

from profiler_service.api.deps import AlertsDep
from profiler_service.api.schemas import ErrorPublic
from profiler_service.api.webhook_auth import check_authorization, is_hub, verify_signature
from profiler_service.config import Settings
from profiler_service.errors import InvalidPayload, PayloadTooLarge
from profiler_service.trigger.alerts import (
    AlertOutcome,
    Source,
    WebhookPayload,
    WebhookResult,
)

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
async def receive_grafana_alerts(
    request: Request,
    alerts: AlertsDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Take a Grafana alerting webhook; capture for firing alerts, say what was done for each."""
    settings = alerts.settings
    from_hub = is_hub(settings, authorization)  # it checked the signature itself
    signing = settings.webhook_hmac_secret is not None and not from_hub
    check_authorization(settings, authorization, signing_required=signing)
    body = await read_body(request, settings)
    if not from_hub:
        verify_signature(settings, request.headers, body, time.time())
    return _answer(alerts.handle(Source.GRAFANA, parse_payload(body)))


@router.post(
    "/alertmanager", status_code=202, response_model=WebhookResult, openapi_extra=_BODY_DOC
)
async def receive_alertmanager_alerts(
    request: Request,
    alerts: AlertsDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Take an Alertmanager webhook (version 4); capture for firing alerts, answer per alert."""
    settings = alerts.settings
    check_authorization(settings, authorization, signing_required=False)
    body = await read_body(request, settings)
    return _answer(alerts.handle(Source.ALERTMANAGER, parse_payload(body)))


@router.get("/alerts", response_model=AlertLogPublic)
def list_alert_outcomes(
    alerts: AlertsDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> AlertLogPublic:
    """The newest webhook alerts and what was done with each, and the counts since start."""
    counts: dict[str, dict[str, int]] = {}
    for (source, outcome), n in sorted(alerts.log.counts().items()):
        counts.setdefault(source, {})[outcome] = n
    data = alerts.log.recent(limit)
    return AlertLogPublic(data=data, count=len(data), counts=counts)


def _answer(result: WebhookResult) -> Response:
    # Serialised once here: FastAPI would validate the model again before serialising it.
    return Response(result.model_dump_json(), status_code=202, media_type="application/json")


async def read_body(request: Request, settings: Settings) -> bytes:
    limit = settings.webhook_max_body_bytes
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


def parse_payload(body: bytes) -> WebhookPayload:
    return validate_payload(load_object(body))


def load_object(body: bytes) -> dict:
    """The body as a JSON object (the fleet hub forwards it, so it keeps the raw form too)."""
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
