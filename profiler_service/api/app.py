"""The FastAPI application: routes, error handlers, and the service behind them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from profiler_service import __version__
from profiler_service.api.auth import install_auth
from profiler_service.api.docs_page import install_docs_page
from profiler_service.api.errors import install_error_handlers
from profiler_service.api.routes import (
    comparisons,
    health,
    metrics,
    profile_changes,
    profiles,
    webhooks,
)
from profiler_service.api.sidecar import ServiceCore
from profiler_service.service import Service

log = logging.getLogger(__name__)


def create_app(service: Service) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.start()
        yield
        left = await anyio.to_thread.run_sync(
            service.controller.drain, service.settings.server.shutdown_grace_s
        )
        if left:
            log.warning("stopping with captures in flight (interrupted at next start): %s", left)
        service.stop()

    app = FastAPI(
        title="profiler-service",
        version=__version__,
        summary="On-demand, bounded profiling of TensorFlow jobs, analysed with XProf.",
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: api/docs_page.py instead
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.service = service  # the sidecar's own routes: captures, changes to its store
    app.state.core = ServiceCore(service)  # what it shares with the hub (api/core.py)
    install_auth(app, service.settings if service is not None else None, hub_vouches=True)
    install_error_handlers(app)
    install_docs_page(app)
    app.include_router(profile_changes.router)
    app.include_router(profiles.read_router)
    app.include_router(comparisons.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(webhooks.router)
    return app
