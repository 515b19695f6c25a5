"""Every error leaves the API as JSON `{error, detail}` with a stable code."""

from __future__ import annotations

import errno
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from profiler_service.errors import InternalError, ServiceError, SnapshotErrorCode

log = logging.getLogger(__name__)

_STORE_ERRNOS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM}
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
# The codes only these handlers give (the others are ServiceError's subclasses), for the docs.
HANDLER_ERRORS = {
    "not_found": (404, "No such route."),
    "method_not_allowed": (405, "The route does not take that method."),
    "http_error": (0, "Any other HTTP error the framework raises, with its status."),
}

# A failed snapshot's HTTP status, where a request waited for it (`POST /profile?wait=true`):
# the job's profiler failed the capture (502; 504 when it did not answer in time; 409 when
# another session held it), the store refused it (503), or the service could not analyse it.
_GATEWAY = {
    SnapshotErrorCode.TARGET_UNREACHABLE,
    SnapshotErrorCode.TARGET_LOST,
    SnapshotErrorCode.TARGET_DISCOVERY_FAILED,
    SnapshotErrorCode.INVALID_TARGET_ADDRESS,
    SnapshotErrorCode.NO_TRACE_EVENTS,
    SnapshotErrorCode.CAPTURE_FILE_MISSING,
    SnapshotErrorCode.CAPTURE_EMPTY,
    SnapshotErrorCode.CAPTURE_FETCH_FAILED,
    SnapshotErrorCode.CAPTURE_FAILED,
}
FAILED_SNAPSHOT_STATUS: dict[str, int] = {
    **dict.fromkeys(_GATEWAY, 502),
    SnapshotErrorCode.TARGET_TIMEOUT: 504,
    SnapshotErrorCode.CAPTURE_TIMEOUT: 504,
    SnapshotErrorCode.PROFILER_BUSY: 409,
    SnapshotErrorCode.STORE_NOT_WRITABLE: 503,
}


def failed_snapshot_status(code: SnapshotErrorCode | str) -> int:
    """The status a request that waited for a snapshot gets when it failed with `code`: 500
    for the analysis's failures and any code this version does not know."""
    return FAILED_SNAPSHOT_STATUS.get(code, 500)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        body = {"error": exc.code, "detail": exc.detail, **exc.extra}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            where = ".".join(
                str(p) for p in err.get("loc", ()) if p not in ("query", "path", "body")
            )
            problems.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        return JSONResponse(
            {"error": "invalid_request", "detail": "; ".join(problems) or "invalid request"},
            status_code=422,
        )

    @app.exception_handler(OSError)
    async def os_error(_: Request, exc: OSError) -> JSONResponse:
        """The store's filesystem refused a write (read-only, full, permissions)."""
        if exc.errno not in _STORE_ERRNOS:
            raise exc  # not the store's: a 500, below
        return JSONResponse(  # the reason, not the path
            {
                "error": "store_not_writable",
                "detail": f"the snapshot store refused a write: {exc.strerror or 'I/O error'}",
            },
            status_code=503,
        )

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        """A bug: still JSON in the error shape, with an error id and no exception text (it may
        name paths, hosts, a driver's message); the log line with that id has the traceback."""
        error = InternalError.logged(exc, f"{request.method} {request.url.path}", log)
        body = {"error": error.code, "detail": error.detail, **error.extra}
        return JSONResponse(body, status_code=error.status_code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return JSONResponse(
            {"error": code, "detail": str(exc.detail)},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )
