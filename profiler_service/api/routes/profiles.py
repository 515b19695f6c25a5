"""Captures and snapshots: `POST /profile`, `GET|DELETE /profiles/...`."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, StreamingResponse

from profiler_service.analysis.compare import compare
from profiler_service.analysis.models import Severity
from profiler_service.api.deps import (
    CaptureRequired,
    ControllerDep,
    ReaderDep,
    ReadRequired,
    SettingsDep,
    StoreDep,
)
from profiler_service.api.schemas import (
    ERROR_RESPONSES,
    SnapshotPublic,
    SnapshotsPublic,
    snapshots_page_json,
)
from profiler_service.capture.controller import CaptureRequest
from profiler_service.durations import parse_duration
from profiler_service.errors import FileNotFound, InvalidRequest, SnapshotNotFound
from profiler_service.exporters.report import render_report
from profiler_service.models import SnapshotStatus, Trigger, TriggerKind, is_snapshot_id
from profiler_service.store import SnapshotQuery

_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

router = APIRouter(tags=["profiles"], responses=ERROR_RESPONSES)
# The reads: the fleet hub serves them too, over its index of the shared bucket (api/core.py).
read_router = APIRouter(tags=["profiles"], responses=ERROR_RESPONSES, dependencies=[ReadRequired])

SnapshotId = Annotated[str, Path(description="snapshot id, e.g. 20261202-164155-default-a1b2c3")]


def checked_id(snapshot_id: str) -> str:
    if not is_snapshot_id(snapshot_id):
        raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
    return snapshot_id


@router.post(
    "/profile", status_code=202, response_model=SnapshotPublic, dependencies=[CaptureRequired]
)
def create_profile(
    request: Request,
    response: Response,
    settings: SettingsDep,
    controller: ControllerDep,
    store: StoreDep,
    duration: Annotated[str | None, Query(description="500ms, 5s, 2m or seconds")] = None,
    target: Annotated[str | None, Query(description="a configured target's name")] = None,
    host_tracer_level: Annotated[int | None, Query(ge=0, le=3)] = None,
    python_tracer_level: Annotated[int | None, Query(ge=0, le=1)] = None,
    device_tracer_level: Annotated[int | None, Query(ge=0, le=1)] = None,
    wait: Annotated[bool, Query(description="answer once the snapshot is analysed")] = False,
    label: Annotated[
        list[str] | None, Query(description="name=value, e.g. model_version=v7; repeatable")
    ] = None,
) -> SnapshotPublic:
    """Start a bounded capture; 202 at once, or 200 when finished with `wait=true`.

    409 `capture_in_progress` with `Retry-After` while the target is being captured; 422
    `invalid_duration` naming the allowed range, or `unknown_target`; 503 `store_not_writable`.
    Durations: `500ms`, `5s`, `2m` or bare seconds.
    """
    labels = _parse_labels(label or [])
    seconds = parse_duration(
        duration,
        default_s=settings.bounds.duration_default_s,
        min_s=settings.bounds.duration_min_s,
        max_s=settings.bounds.duration_max_s,
    )
    client = request.client.host if request.client else None
    snapshot = controller.start(
        CaptureRequest(
            duration_s=seconds,
            target=target,
            host_tracer_level=host_tracer_level,
            python_tracer_level=python_tracer_level,
            device_tracer_level=device_tracer_level,
            trigger=Trigger(kind=TriggerKind.API, source=client, labels=labels),
        )
    )
    if wait:
        controller.wait(snapshot.id, controller.max_wait_s(seconds))
        snapshot = store.get(snapshot.id)
        response.status_code = 200
    response.headers["Location"] = f"/profiles/{snapshot.id}"
    return SnapshotPublic.of(snapshot, settings.report)


@read_router.get("/profiles", response_model=SnapshotsPublic)
def list_profiles(
    settings: SettingsDep,
    store: ReaderDep,
    status: SnapshotStatus | None = None,
    trigger: TriggerKind | None = None,
    target: str | None = None,
    rule: Annotated[str | None, Query(description="snapshots with a finding of this rule")] = None,
    severity: Annotated[
        Severity | None, Query(description="snapshots with a finding of this severity")
    ] = None,
    namespace: Annotated[
        str | None, Query(description="taken by a sidecar of this namespace")
    ] = None,
    pod: Annotated[str | None, Query(description="taken by the sidecar of this pod")] = None,
    workload: Annotated[
        str | None, Query(description="of this job (its workload: the chart's release)")
    ] = None,
    since: Annotated[datetime | None, Query(description="created at or after (ISO 8601)")] = None,
    until: Annotated[datetime | None, Query(description="created before (ISO 8601)")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,  # SQLite's INTEGER; fuzzing found it
) -> Response:
    """List snapshots, newest first, without their analysis (a page of 50 in kilobytes).

    Each item is the snapshot without its summary, lead-up and findings' evidence; the whole
    snapshot is at `links.self` (`GET /profiles/{id}`)."""
    docs, total = store.list_docs(
        SnapshotQuery(
            status=status,
            trigger=trigger,
            target=target,
            rule=rule,
            severity=severity,
            pod=pod,
            namespace=namespace,
            workload=workload,
            since=_utc(since),
            until=_utc(until),
            limit=limit,
            offset=offset,
        )
    )
    page = snapshots_page_json(docs, total, limit, offset, settings.report)
    return Response(page, media_type="application/json")


@read_router.get("/profiles/{snapshot_id}", response_model=SnapshotPublic)
def read_profile(
    snapshot_id: SnapshotId, settings: SettingsDep, store: ReaderDep
) -> SnapshotPublic:
    """One snapshot: status, trigger, capture options, summary, findings, links."""
    return SnapshotPublic.of(store.get(checked_id(snapshot_id)), settings.report)


@read_router.get("/profiles/{snapshot_id}/report", response_class=HTMLResponse)
def read_profile_report(
    snapshot_id: SnapshotId,
    settings: SettingsDep,
    store: ReaderDep,
    baseline: Annotated[
        str | None, Query(description="compare side by side with this snapshot id")
    ] = None,
) -> str:
    """The report a person reads first: findings, step-time chart, top ops, memory, links."""
    snapshot = store.get(checked_id(snapshot_id))
    comparison = None
    if baseline is not None:
        base = store.get(checked_id(baseline))
        comparison = (base, compare(base, snapshot))
    return render_report(snapshot, settings.report, comparison)


@read_router.get("/profiles/{snapshot_id}/files/{name:path}", response_class=FileResponse)
def read_profile_file(snapshot_id: SnapshotId, name: str, store: ReaderDep) -> Response:
    """Download a raw capture file (`<host>.xplane.pb`), from disk or the shared object store."""
    try:
        path = store.file_path(checked_id(snapshot_id), name)
    except FileNotFound:
        size, chunks = store.remote_file(snapshot_id, name)  # another sidecar's snapshot
        return StreamingResponse(
            chunks,
            media_type="application/octet-stream",
            headers={
                "Content-Length": str(size),
                "Content-Disposition": f'attachment; filename="{name}"',
            },
        )
    return FileResponse(path, media_type="application/octet-stream", filename=path.name)


@router.delete("/profiles/{snapshot_id}", status_code=204, dependencies=[CaptureRequired])
def delete_profile(snapshot_id: SnapshotId, store: StoreDep) -> Response:
    """Remove a finished snapshot and its files (409 `snapshot_in_progress` while in flight)."""
    store.delete(checked_id(snapshot_id))
    return Response(status_code=204)


@router.put(
    "/profiles/{snapshot_id}/pin", response_model=SnapshotPublic, dependencies=[CaptureRequired]
)
def pin_profile(snapshot_id: SnapshotId, settings: SettingsDep, store: StoreDep) -> SnapshotPublic:
    """Pin a snapshot (a baseline): retention never evicts it."""
    return SnapshotPublic.of(store.set_pinned(checked_id(snapshot_id), True), settings.report)


@router.delete(
    "/profiles/{snapshot_id}/pin", response_model=SnapshotPublic, dependencies=[CaptureRequired]
)
def unpin_profile(
    snapshot_id: SnapshotId, settings: SettingsDep, store: StoreDep
) -> SnapshotPublic:
    """Unpin a snapshot, so retention may evict it again."""
    return SnapshotPublic.of(store.set_pinned(checked_id(snapshot_id), False), settings.report)


def _parse_labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _LABEL_NAME.match(name) or not value or len(value) > 128:
            raise InvalidRequest(
                f"label {item!r} must look like name=value (name: [A-Za-z_][A-Za-z0-9_]*)"
            )
        labels[name] = value
    return labels


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
