"""The hub's own routes: the sidecars' registry, operators' captures, the fleet page.

The snapshot reads (`GET /profiles...`), `/metrics`, `/healthz` and the webhooks are the
sidecar's routes, served over the hub's core (app.py): its index, and its router for alerts.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import HTMLResponse

from profiler_service.api.auth import Grant, Scope, requires
from profiler_service.api.deps import CaptureReach, CaptureRequired, ReadReach, ReadRequired
from profiler_service.api.schemas import ERROR_RESPONSES
from profiler_service.durations import parse_window
from profiler_service.errors import InvalidRequest
from profiler_service.hub.explain import ExplainState
from profiler_service.hub.fleet import HubService
from profiler_service.hub.ledger import Ledger
from profiler_service.hub.registry import SidecarsPublic
from profiler_service.hub.routing import FleetRouter
from profiler_service.hub.views import DEFAULT_DAYS, fleet_view, render_fleet
from profiler_service.sidecar_record import SIDECAR_NAME_PATTERN, SidecarRecord
from profiler_service.tenancy import Reach

router = APIRouter(responses=ERROR_RESPONSES)


def get_hub(request: Request) -> HubService:
    return request.app.state.hub


HubDep = Annotated[HubService, Depends(get_hub)]
SidecarName = Annotated[str, Path(pattern=SIDECAR_NAME_PATTERN, description="its pod name")]
RegisterRequired = requires(Scope.REGISTER)


@router.put(
    "/sidecars/{name}", response_model=SidecarRecord, tags=["sidecars"],
    dependencies=[RegisterRequired],
)  # fmt: skip
def register_sidecar(name: SidecarName, record: SidecarRecord, hub: HubDep) -> SidecarRecord:
    """Register a sidecar, or refresh its heartbeat (it does so every hub_heartbeat_s)."""
    if record.name != name:
        raise InvalidRequest(f"the record names {record.name!r}, the path {name!r}")
    return hub.registry.heartbeat(record.model_copy(update={"via": "hub"}))


@router.delete(
    "/sidecars/{name}", status_code=204, tags=["sidecars"], dependencies=[RegisterRequired]
)
def deregister_sidecar(name: SidecarName, hub: HubDep, namespace: str | None = None) -> Response:
    """Forget a sidecar at once (it stops gracefully); a killed one drops out after the TTL."""
    hub.registry.remove(name, namespace)
    return Response(status_code=204)


@router.get(
    "/sidecars", response_model=SidecarsPublic, tags=["sidecars"], dependencies=[ReadRequired]
)
def list_sidecars(hub: HubDep, reach: ReadReach, namespace: str | None = None) -> SidecarsPublic:
    """The live sidecars (heard from within hub_sidecar_ttl_s) of the namespaces you read."""
    live = reach.keep(hub.registry.live(), lambda s: s.namespace)
    data = [s for s in live if namespace is None or s.namespace == namespace]
    return SidecarsPublic(data=data, count=len(data))


@router.post("/profile", tags=["profiles"], dependencies=[CaptureRequired])
async def route_profile(
    request: Request,
    hub: HubDep,
    reach: CaptureReach,
    target: Annotated[str, Query(description="a target a registered sidecar captures")],
    namespace: Annotated[str | None, Query(description="the sidecar's namespace")] = None,
    pod: Annotated[str | None, Query(description="the sidecar's pod")] = None,
    wait: bool = False,
) -> Response:
    """Start a capture on the sidecar that captures `target`; its answer, as it gave it.

    Only sidecars of the namespaces your token may capture are candidates. A token that captures
    there but does not read there gets the snapshot's head (id, status, times, options), not
    its analysis (summary, findings, lead-up), `wait=true` included.
    """
    router: FleetRouter = hub.router
    query = [(k, v) for k, v in request.query_params.multi_items() if k not in ("namespace", "pod")]
    sidecars = reach.keep(hub.registry.live(), lambda s: s.namespace)
    sidecar, answer = await router.forward_profile(query, target, namespace, pod, wait, sidecars)
    headers = {"X-Profiler-Sidecar": sidecar.key}
    for name in ("location", "retry-after"):
        if name in answer.headers:
            headers[name] = answer.headers[name]
    content = answer.content
    if not _reads(request, sidecar.namespace):  # wait=true's failure holds the snapshot too
        content = _without_analysis(content)
    return Response(
        content,
        status_code=answer.status_code,
        media_type=answer.headers.get("content-type", "application/json"),
        headers=headers,
    )


# What a capture's answer holds that only a reader may see (models.Snapshot over SnapshotHead).
_ANALYSIS = ("summary", "findings", "lead_up")


def _reads(request: Request, namespace: str | None) -> bool:
    """Whether the request may read `namespace` (a tenant's token may capture where it does not
    read); every request of an app without authentication may."""
    grant = request.scope.get("auth")
    if not isinstance(grant, Grant):
        return True
    return Scope.READ in grant.scope_set and grant.reach(Scope.READ).allows(namespace)


def _without_analysis(content: bytes) -> bytes:
    """A sidecar's answer without what its analysis found: a snapshot's, or the one a failed
    `wait=true` holds under `snapshot` (an error's other fields are kept)."""
    try:
        answer = json.loads(content)
    except ValueError:
        return b"{}"  # never pass on a body that could not be checked
    if not isinstance(answer, dict):
        return b"{}"
    for snapshot in (answer, answer.get("snapshot")):
        if isinstance(snapshot, dict):
            for key in _ANALYSIS:
                snapshot.pop(key, None)
    return json.dumps(answer).encode()


LEDGER_MAX_S = 90 * 86400


def _ledger_of(hub: HubService, window: str) -> Ledger:
    if hub.ledger is None:
        raise InvalidRequest("this hub keeps no ledger")
    settings = hub.settings.ledger
    window_s = parse_window(window, min_s=settings.ledger_bucket_s, max_s=LEDGER_MAX_S)
    return hub.ledger.ledger(window_s)


@router.get(
    "/fleet/ledger", response_model=Ledger, tags=["fleet"], dependencies=[ReadRequired]
)  # fmt: skip
def read_fleet_ledger(
    hub: HubDep,
    reach: ReadReach,
    window: Annotated[str, Query(description="how far back: 24h, 7d, 2w ...")] = "24h",
) -> Ledger:
    """GPU-hours of every job over the window: held, busy, idle by cause, recoverable by the
    findings' fixes, and their cost; totals per namespace and over the fleet. Only the
    namespaces your token reads; most recoverable first. Rebuilt at most every
    `hub_ledger_refresh_s`."""
    return _ledger_of(hub, window).within(reach)


@router.get(
    "/fleet/explain", response_model=ExplainState, tags=["fleet"], dependencies=[ReadRequired]
)  # fmt: skip
def read_fleet_explain(hub: HubDep, reach: ReadReach) -> ExplainState:
    """The captures the hub asks for to explain the ledger's `no_capture` idle hours
    (hub_explain_idle): each job's last ask within the capture horizon and its sidecar's
    answer, the jobs waiting for this hour's budget, and those no live sidecar profiles; off,
    the jobs it would ask. Only the namespaces your token reads."""
    if hub.explain is None:
        raise InvalidRequest("this hub keeps no ledger")
    return hub.explain.state().within(reach)


@router.get("/fleet", response_class=HTMLResponse, tags=["fleet"], dependencies=[ReadRequired])
def read_fleet_page(
    hub: HubDep,
    reach: ReadReach,
    days: Annotated[float, Query(gt=0, le=90)] = DEFAULT_DAYS,
    namespace: Annotated[str | None, Query(description="only this namespace's jobs")] = None,
    limit: Annotated[int, Query(ge=1, le=2000, description="jobs (and sidecars) shown")] = 200,
    offset: Annotated[int, Query(ge=0, le=10**6, description="jobs skipped")] = 0,
) -> str:
    """Every job's latest verdict, step time over the window, regressions, findings by rule.

    A job is its namespace, workload and target; only the namespaces your token reads. The
    regressed jobs come first; `limit` jobs a page (the counts are over them all).
    """
    if namespace is not None:
        reach = Reach(frozenset({namespace} if reach.allows(namespace) else ()))
    if days == DEFAULT_DAYS:
        view = hub.metrics.collector.view()  # as of the last sync, shared with /metrics
    else:
        view = fleet_view(hub.store.fleet, hub.settings.report, days, hub.fleet_sync.baseline_ids)
    sidecars = reach.keep(hub.registry.live(), lambda s: s.namespace)
    ledger = None
    if hub.ledger is not None:  # the page's window, at least one ledger bucket
        window_s = max(days * 86400, hub.settings.ledger.ledger_bucket_s)
        ledger = hub.ledger.ledger(window_s).within(reach)
    explain = hub.explain.state().within(reach) if hub.explain is not None else None
    return render_fleet(
        view.within(reach),
        sidecars,
        hub.settings.report,
        ledger,
        explain=(explain, _explained_hours(hub, reach)) if explain is not None else None,
        limit=limit,
        offset=offset,
        query={"namespace": namespace, "days": None if days == DEFAULT_DAYS else days},
    )


def _explained_hours(hub: HubService, reach: Reach) -> dict[str, float] | None:
    """Idle and no_capture GPU-hours over the explain policy's window (its last ledger, never
    built here), of the namespaces `reach` allows."""
    if hub.explain is None or hub.ledger is None:
        return None
    ledger = hub.ledger.latest(hub.explain.window_s)
    if ledger is None or ledger.source != "prometheus":
        return None
    totals = ledger.within(reach).totals
    return {
        "idle": totals.idle_gpu_hours or 0.0,
        "no_capture": totals.idle_by_cause.get("no_capture", 0.0),
    }
