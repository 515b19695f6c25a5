"""The HTTP servers' access log: every request at INFO but the routine ones.

Prometheus scrapes `/metrics` every few seconds and Kubernetes probes `/healthz` and `/readyz`
as often: at INFO those lines bury the requests someone made. Their successful answers are
logged at DEBUG (`--log-level DEBUG` shows them); a failed one (a 503 from `/readyz`) stays
at INFO, as does every other request.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

__all__ = ["ROUTINE_PATHS", "RoutineRequests", "log_config"]

ROUTINE_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})


class RoutineRequests(logging.Filter):
    """Uvicorn's access records (`client, method, path, http version, status`) of a routine
    path answered below 400, moved to DEBUG: kept only where DEBUG is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.levelno != logging.INFO or not isinstance(args, tuple) or len(args) < 5:
            return True
        path, status = str(args[2]).partition("?")[0], args[4]
        if path not in ROUTINE_PATHS or not isinstance(status, int) or status >= 400:
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def log_config() -> dict[str, Any]:
    """Uvicorn's own logging configuration with `RoutineRequests` on its access logger."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["routine_requests"] = {"()": RoutineRequests}
    config["loggers"]["uvicorn.access"].setdefault("filters", []).append("routine_requests")
    return config
