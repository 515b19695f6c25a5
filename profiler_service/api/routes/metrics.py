"""Prometheus exposition."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import Response

from profiler_service.api.deps import MetricsDep, ReadReach, ReadRequired

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}, "application/openmetrics-text": {}}}},
    dependencies=[ReadRequired],
)
def read_metrics(
    metrics: MetricsDep, reach: ReadReach, accept: Annotated[str | None, Header()] = None
) -> Response:
    """Prometheus text format; OpenMetrics (with exemplars) when the Accept header asks for it.

    Open to anyone who may read (everyone, unless the hub has a tokens file: then a token's
    scrape holds the series of the namespaces it reads).
    """
    body, content_type = metrics.render(accept, reach)
    return Response(content=body, media_type=content_type)
