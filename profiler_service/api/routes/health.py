"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from profiler_service.api.deps import LoopsDep, ReaderDep, TargetsDep
from profiler_service.api.schemas import HealthPublic
from profiler_service.capture.capturer import CaptureFailed
from profiler_service.capture.discovery import resolve_workers
from profiler_service.capture.remote import connect_error
from profiler_service.errors import StoreNotWritable
from profiler_service.targets import Target, TargetKind

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthPublic, responses={503: {"model": HealthPublic}})
def read_health(loops: LoopsDep):
    """The process answers and every background loop it started still has its thread.

    503 with `checks` naming a loop whose thread ended without being stopped: only a restart
    brings it back.
    """
    checks = {f"loop:{h.name}": h.problem() or "ok" for h in loops if h.died}
    return _answer(checks, good="ok", bad="unhealthy")


@router.get("/readyz", response_model=HealthPublic, responses={503: {"model": HealthPublic}})
def read_readiness(targets: TargetsDep, store: ReaderDep, loops: LoopsDep):
    """Ready when the store is writable, every target's profiler port accepts connections and
    no background loop keeps failing (`FAILING_AFTER_ROUNDS` rounds in a row).

    503 with `checks` naming what is not ready.
    """
    checks: dict[str, str] = {f"loop:{h.name}": h.problem() or "ok" for h in loops}
    try:
        store.check_writable()
        checks["store"] = "ok"
    except StoreNotWritable as exc:
        checks["store"] = exc.detail
    for target in targets:
        checks[f"target:{target.name}"] = _target_check(target)
    return _answer(checks, good="ready", bad="unready")


def _answer(checks: dict[str, str], *, good: str, bad: str) -> JSONResponse:
    fine = all(v == "ok" for v in checks.values())
    body = HealthPublic(status=good if fine else bad, checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if fine else 503)


def _target_check(target: Target) -> str:
    """The first worker's profiler port accepts connections (found first if discovered)."""
    if target.kind is not TargetKind.GRPC:
        return "ok"
    try:
        found, _ = resolve_workers(target, max_workers=1)
    except CaptureFailed as exc:
        return exc.detail
    address = found.service_addr
    error = connect_error(address)
    return "ok" if error is None else f"profiler server unreachable at {address}: {error}"
