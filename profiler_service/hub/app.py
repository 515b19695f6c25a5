"""The hub's FastAPI application: its own routes plus the routes it shares with a sidecar (the
reads, health, metrics, the webhook receiver), served over its core (`HubService`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from profiler_service import __version__
from profiler_service.api.auth import install_auth
from profiler_service.api.docs_page import install_docs_page
from profiler_service.api.errors import install_error_handlers
from profiler_service.api.routes import health, metrics, profiles, webhooks
from profiler_service.hub import routes
from profiler_service.hub.fleet import HubService


def create_hub_app(hub: HubService) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        hub.start()
        yield
        await hub.router.aclose()
        hub.stop()

    app = FastAPI(
        title="profiler-service hub",
        version=__version__,
        summary="One contact point and one view for a fleet of profiler-service sidecars.",
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: api/docs_page.py instead
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.core = hub  # what the shared routes read (api/core.py AppCore)
    app.state.hub = hub  # what the hub's own routes read
    # The hub checks Grafana's signature itself: its own token vouches for nothing here.
    install_auth(
        app,
        hub.settings if hub is not None else None,
        hub_vouches=False,
        tenants=hub.tenants if hub is not None else None,
    )
    install_error_handlers(app)
    install_docs_page(app)

    @app.exception_handler(SQLAlchemyError)
    async def index_unavailable(_: Request, exc: SQLAlchemyError) -> JSONResponse:
        """The index's database failed a read the route could not answer without it."""
        error = hub.store.unavailable(exc)
        return JSONResponse({"error": error.code, "detail": error.detail}, status_code=503)

    app.include_router(routes.router)
    app.include_router(profiles.read_router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(webhooks.router)
    return app
