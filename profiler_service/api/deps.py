"""Dependencies the routes declare: the app's core (both apps) and who may call them. A
sidecar's own parts: api/sidecar.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from profiler_service.api.auth import Scope, reach, requires
from profiler_service.api.core import AlertSink, MetricsPage, SnapshotReader
from profiler_service.api.tenants import ScopedReader
from profiler_service.config import AppSettings
from profiler_service.lifecycle import LoopHealth
from profiler_service.targets import Target
from profiler_service.tenancy import Reach

# ---- the core: what a sidecar and the hub both serve (api/core.py) ----------------------------


async def get_settings(request: Request) -> AppSettings:
    return request.app.state.core.settings


async def get_targets(request: Request) -> list[Target]:
    return request.app.state.core.targets


async def get_reader(request: Request) -> SnapshotReader:
    """The snapshot reads, held to the namespaces the request may read (a tenant's token)."""
    store = request.app.state.core.store
    where = reach(request, Scope.READ)
    return store if where.everywhere else ScopedReader(store, where)


async def get_metrics(request: Request) -> MetricsPage:
    return request.app.state.core.metrics


async def get_loops(request: Request) -> list[LoopHealth]:
    return request.app.state.core.loop_health()


async def get_alerts(request: Request) -> AlertSink:
    """Async on purpose: a sync dependency costs a worker-thread hop on every webhook."""
    return request.app.state.core.alerts


SettingsDep = Annotated[AppSettings, Depends(get_settings)]
TargetsDep = Annotated[list[Target], Depends(get_targets)]
ReaderDep = Annotated[SnapshotReader, Depends(get_reader)]
MetricsDep = Annotated[MetricsPage, Depends(get_metrics)]
AlertsDep = Annotated[AlertSink, Depends(get_alerts)]
LoopsDep = Annotated[list[LoopHealth], Depends(get_loops)]

# ---- who may: declared by each route, decided in api/auth.py ----------------------------------

ReadRequired = requires(Scope.READ)
CaptureRequired = requires(Scope.CAPTURE)


async def get_read_reach(request: Request) -> Reach:
    return reach(request, Scope.READ)


async def get_capture_reach(request: Request) -> Reach:
    return reach(request, Scope.CAPTURE)


# Where the request may read and capture: what a listing that is not of snapshots (the hub's
# sidecars, its alert log, its fleet page and metrics) is held to.
ReadReach = Annotated[Reach, Depends(get_read_reach)]
CaptureReach = Annotated[Reach, Depends(get_capture_reach)]
