"""Dependencies the routes declare: the service's parts, and the API token check."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from profiler_service.capture.controller import CaptureController
from profiler_service.config import Settings
from profiler_service.errors import Forbidden, Unauthorized
from profiler_service.exporters.metrics import ServiceMetrics
from profiler_service.service import Service
from profiler_service.store import SnapshotStore
from profiler_service.trigger.alert_log import AlertLog
from profiler_service.trigger.alerts import AlertTrigger


def get_service(request: Request) -> Service:
    return request.app.state.service


def get_settings(request: Request) -> Settings:
    return request.app.state.service.settings


def get_store(request: Request) -> SnapshotStore:
    return request.app.state.service.store


def get_controller(request: Request) -> CaptureController:
    return request.app.state.service.controller


def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.service.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[SnapshotStore, Depends(get_store)]
ControllerDep = Annotated[CaptureController, Depends(get_controller)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]


async def get_alerts(request: Request) -> AlertTrigger:
    """Async on purpose: a sync dependency costs a worker-thread hop on every webhook."""
    service = request.app.state.service
    if service.alerts is None:  # a Service built by hand: decisions kept in memory only
        service.alerts = AlertTrigger(service.settings, service.controller, AlertLog(None))
    return service.alerts


AlertsDep = Annotated[AlertTrigger, Depends(get_alerts)]

_bearer = HTTPBearer(auto_error=False, description="PROFILER_API_TOKEN, when one is configured")


def require_token(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Mutating endpoints need `Authorization: Bearer <PROFILER_API_TOKEN>` when a token is set
    (or the fleet's PROFILER_HUB_TOKEN: the hub forwarding an operator's capture)."""
    if settings.api_token is None:
        return
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized(
            "this endpoint needs an 'Authorization: Bearer <token>' header",
            headers={"WWW-Authenticate": "Bearer"},
        )
    given = credentials.credentials.encode()
    accepted = [settings.api_token] + ([settings.hub_token] if settings.hub_token else [])
    # Compared with every accepted token, so the time taken says nothing about which matched.
    if not any([hmac.compare_digest(given, t.get_secret_value().encode()) for t in accepted]):
        raise Forbidden("the bearer token is not valid for this service")


TokenRequired = Depends(require_token)
