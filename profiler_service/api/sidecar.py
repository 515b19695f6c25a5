"""A sidecar's app core and the dependencies of its own routes (captures, changes to its
store): the only part of api/ that reads the sidecar's pipeline (`Service`), so the hub, which
serves the shared routes, loads none of it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from profiler_service.api.core import AlertSink, MetricsPage, SnapshotReader
from profiler_service.capture.controller import CaptureController
from profiler_service.config import AppSettings
from profiler_service.lifecycle import LoopHealth
from profiler_service.service import Service
from profiler_service.store import SnapshotStore
from profiler_service.targets import Target
from profiler_service.trigger.alert_log import AlertLog
from profiler_service.trigger.alerts import PLUGIN as ALERTS
from profiler_service.trigger.alerts import AlertTrigger

__all__ = ["ControllerDep", "ServiceCore", "StoreDep"]


class ServiceCore:
    """A sidecar's core: its `Service`'s parts."""

    def __init__(self, service: Service):
        self.service = service

    @property
    def settings(self) -> AppSettings:
        return self.service.settings

    @property
    def targets(self) -> list[Target]:
        return self.service.settings.capture.targets

    @property
    def store(self) -> SnapshotReader:
        return self.service.store

    @property
    def metrics(self) -> MetricsPage:
        return self.service.metrics  # type: ignore[return-value]  # built by build_service

    def loop_health(self) -> list[LoopHealth]:
        return self.service.lifecycle.loop_health()

    @property
    def alerts(self) -> AlertSink:
        service = self.service
        trigger = service.alerts
        if trigger is None:  # a Service built by hand: decisions kept in memory only
            trigger = AlertTrigger(service.settings.webhook, service.controller, AlertLog(None))
            service.triggers.add(ALERTS, trigger)
        return trigger


async def get_store(request: Request) -> SnapshotStore:
    return request.app.state.service.store


async def get_controller(request: Request) -> CaptureController:
    return request.app.state.service.controller


StoreDep = Annotated[SnapshotStore, Depends(get_store)]
ControllerDep = Annotated[CaptureController, Depends(get_controller)]
