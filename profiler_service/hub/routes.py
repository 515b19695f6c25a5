"""The hub's own routes: the sidecars' registry, the fleet's webhooks and captures, the page.

The snapshot reads (`GET /profiles...`), `/metrics`, `/healthz` and `/webhooks/alerts` are the
sidecar's routes, served over the hub's index (app.py).
"""

from __future__ import annotations

import hmac
import time
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.responses import HTMLResponse

from profiler_service.api.deps import TokenRequired
from profiler_service.api.routes.webhooks import load_object, read_body, validate_payload
from profiler_service.api.schemas import ERROR_RESPONSES
from profiler_service.api.webhook_auth import check_authorization, verify_signature
from profiler_service.errors import Forbidden, InvalidRequest, Unauthorized
from profiler_service.hub.fleet import HubService
from profiler_service.hub.registry import SIDECAR_NAME_PATTERN, SidecarRecord, SidecarsPublic
from profiler_service.hub.routing import FleetRouter
from profiler_service.hub.views import DEFAULT_DAYS, fleet_view, render_fleet
from profiler_service.trigger.alerts import Source, WebhookResult

router = APIRouter(responses=ERROR_RESPONSES)


def get_hub(request: Request) -> HubService:
    return request.app.state.service


HubDep = Annotated[HubService, Depends(get_hub)]
SidecarName = Annotated[str, Path(pattern=SIDECAR_NAME_PATTERN, description="its pod name")]


def require_hub_token(
    hub: HubDep, authorization: Annotated[str | None, Header(include_in_schema=False)] = None
) -> None:
    """Registration needs `Bearer <PROFILER_HUB_TOKEN>` (else the API token, when one is set)."""
    s = hub.settings
    token = s.hub_token or s.api_token
    if token is None:
        return
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized(
            "registering needs an 'Authorization: Bearer <hub token>' header",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(value.strip().encode(), token.get_secret_value().encode()):
        raise Forbidden("the bearer token is not this fleet's hub token")


HubTokenRequired = Depends(require_hub_token)


@router.put(
    "/sidecars/{name}", response_model=SidecarRecord, tags=["sidecars"],
    dependencies=[HubTokenRequired],
)  # fmt: skip
def register_sidecar(name: SidecarName, record: SidecarRecord, hub: HubDep) -> SidecarRecord:
    """Register a sidecar, or refresh its heartbeat (it does so every hub_heartbeat_s)."""
    if record.name != name:
        raise InvalidRequest(f"the record names {record.name!r}, the path {name!r}")
    return hub.registry.heartbeat(record.model_copy(update={"via": "hub"}))


@router.delete(
    "/sidecars/{name}", status_code=204, tags=["sidecars"], dependencies=[HubTokenRequired]
)
def deregister_sidecar(name: SidecarName, hub: HubDep, namespace: str | None = None) -> Response:
    """Forget a sidecar at once (it stops gracefully); a killed one drops out after the TTL."""
    hub.registry.remove(name, namespace)
    return Response(status_code=204)


@router.get("/sidecars", response_model=SidecarsPublic, tags=["sidecars"])
def list_sidecars(hub: HubDep, namespace: str | None = None) -> SidecarsPublic:
    """The live sidecars (heard from within hub_sidecar_ttl_s)."""
    data = [s for s in hub.registry.live() if namespace is None or s.namespace == namespace]
    return SidecarsPublic(data=data, count=len(data))


async def _route(request: Request, hub: HubService, source: Source, signing: bool) -> Response:
    settings = hub.settings
    check_authorization(settings, request.headers.get("authorization"), signing_required=signing)
    body = await read_body(request, settings)
    if signing:
        verify_signature(settings, request.headers, body, time.time())
    data = load_object(body)
    result = await hub.router.handle(source, data, validate_payload(data))
    return Response(result.model_dump_json(), status_code=202, media_type="application/json")


@router.post(
    "/webhooks/alertmanager", status_code=202, response_model=WebhookResult, tags=["webhooks"]
)
async def route_alertmanager_alerts(request: Request, hub: HubDep) -> Response:
    """Route each alert to the sidecar it names; answer what each sidecar did with it."""
    return await _route(request, hub, Source.ALERTMANAGER, signing=False)


@router.post("/webhooks/grafana", status_code=202, response_model=WebhookResult, tags=["webhooks"])
async def route_grafana_alerts(request: Request, hub: HubDep) -> Response:
    """Grafana's contact point: the same routing; its signature is checked here."""
    signing = hub.settings.webhook_hmac_secret is not None
    return await _route(request, hub, Source.GRAFANA, signing=signing)


@router.post("/profile", tags=["profiles"], dependencies=[TokenRequired])
async def route_profile(
    request: Request,
    hub: HubDep,
    target: Annotated[str, Query(description="a target a registered sidecar captures")],
    namespace: Annotated[str | None, Query(description="the sidecar's namespace")] = None,
    pod: Annotated[str | None, Query(description="the sidecar's pod")] = None,
    wait: bool = False,
) -> Response:
    """Start a capture on the sidecar that captures `target`; its answer, as it gave it."""
    router: FleetRouter = hub.router
    query = [(k, v) for k, v in request.query_params.multi_items() if k not in ("namespace", "pod")]
    sidecar, answer = await router.forward_profile(query, target, namespace, pod, wait)
    headers = {"X-Profiler-Sidecar": sidecar.key}
    for name in ("location", "retry-after"):
        if name in answer.headers:
            headers[name] = answer.headers[name]
    return Response(
        answer.content,
        status_code=answer.status_code,
        media_type=answer.headers.get("content-type", "application/json"),
        headers=headers,
    )


@router.get("/fleet", response_class=HTMLResponse, tags=["fleet"])
def read_fleet_page(hub: HubDep, days: Annotated[float, Query(gt=0, le=90)] = DEFAULT_DAYS) -> str:
    """Every job's latest verdict, step time over the window, regressions, findings by rule."""
    if days == DEFAULT_DAYS:
        view = hub.metrics.collector.view()  # as of the last sync, shared with /metrics
    else:
        view = fleet_view(hub.store.index, hub.settings, days)
    return render_fleet(view, hub.registry.live(), hub.settings)
