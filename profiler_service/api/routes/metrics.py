"""Prometheus exposition."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import Response

from profiler_service.api.deps import MetricsDep

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}, "application/openmetrics-text": {}}}},
)
def read_metrics(metrics: MetricsDep, accept: Annotated[str | None, Header()] = None) -> Response:
    """Prometheus text format; OpenMetrics (with exemplars) when the Accept header asks for it."""
    body, content_type = metrics.render(accept)
    return Response(content=body, media_type=content_type)
