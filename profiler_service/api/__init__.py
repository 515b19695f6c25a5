"""HTTP API: routes translate requests into calls of the pipeline stages."""

from profiler_service.api.app import create_app

__all__ = ["create_app"]
