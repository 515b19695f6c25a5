"""The hub's FastAPI application: its own routes plus the sidecar's read routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from profiler_service import __version__
from profiler_service.api.errors import install_error_handlers
from profiler_service.api.routes import health, metrics, profiles
from profiler_service.api.routes.webhooks import AlertLogPublic, list_alert_outcomes
from profiler_service.hub import routes
from profiler_service.hub.fleet import HubService


def create_hub_app(hub: HubService) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        hub.start()
        yield
        await hub.router.aclose()
        hub.close()

    app = FastAPI(
        title="profiler-service hub",
        version=__version__,
        summary="One contact point and one view for a fleet of profiler-service sidecars.",
        lifespan=lifespan,
    )
    app.state.service = hub
    install_error_handlers(app)
    app.include_router(routes.router)
    app.include_router(profiles.read_router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.get("/webhooks/alerts", response_model=AlertLogPublic, tags=["webhooks"])(
        list_alert_outcomes
    )
    return app
