"""What changes a sidecar's store: `POST /profile` (a capture), deleting and pinning snapshots.
The hub serves none of these (it routes captures to the sidecars, hub/routes.py)."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from profiler_service.api.deps import CaptureRequired, SettingsDep
from profiler_service.api.errors import failed_snapshot_status
from profiler_service.api.routes.profiles import SnapshotId, checked_id
from profiler_service.api.schemas import ERROR_RESPONSES, FailedSnapshotPublic, SnapshotPublic
from profiler_service.api.sidecar import ControllerDep, StoreDep
from profiler_service.capture.controller import CaptureRequest
from profiler_service.durations import parse_duration
from profiler_service.errors import InvalidRequest
from profiler_service.models import SnapshotStatus, Trigger, TriggerKind

_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

router = APIRouter(tags=["profiles"], responses=ERROR_RESPONSES)


# What `wait=true` answers for a failed snapshot (api/errors.py FAILED_SNAPSHOT_STATUS).
_FAILED = {"model": FailedSnapshotPublic, "description": "wait=true: the snapshot failed"}


@router.post(
    "/profile",
    status_code=202,
    response_model=SnapshotPublic,
    dependencies=[CaptureRequired],
    responses={200: {"model": SnapshotPublic, "description": "wait=true: the snapshot is ready"}}
    | {code: _FAILED for code in (500, 502, 504)},
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
    """Start a bounded capture; 202 at once, or 200 when ready with `wait=true`.

    409 `capture_in_progress` with `Retry-After` while the target is being captured; 422
    `invalid_duration` naming the allowed range, or `unknown_target`; 503 `store_not_writable`.
    With `wait=true`, a snapshot that failed answers in the error shape, `error` its code and
    `snapshot` the failed snapshot: 502 where the job's profiler failed the capture, 504 where
    it did not answer in time, 409 `profiler_busy`, 503 `store_not_writable`, 500 where the
    analysis failed; one still in flight past the wait, 202. Durations: `500ms`, `5s`, `2m` or
    bare seconds.
    """
    labels = parse_labels(label or [])
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
    location = {"Location": f"/profiles/{snapshot.id}"}
    response.headers.update(location)
    if not wait:
        return SnapshotPublic.of(snapshot, settings.report)
    controller.wait(snapshot.id, controller.max_wait_s(seconds))
    snapshot = store.get(snapshot.id)
    public = SnapshotPublic.of(snapshot, settings.report)
    if snapshot.status is SnapshotStatus.FAILED and snapshot.error is not None:
        failed = FailedSnapshotPublic(
            error=snapshot.error.code, detail=snapshot.error.detail, snapshot=public
        )
        return Response(
            failed.model_dump_json(),
            status_code=failed_snapshot_status(snapshot.error.code),
            media_type="application/json",
            headers=location,
        )
    # Still in flight past the wait (the controller's own bound): accepted, not done.
    response.status_code = 200 if snapshot.status is SnapshotStatus.READY else 202
    return public


@router.delete("/profiles/{snapshot_id}", status_code=204, dependencies=[CaptureRequired])
def delete_profile(snapshot_id: SnapshotId, store: StoreDep) -> Response:
    """Remove a finished snapshot and its files (409 `snapshot_in_progress` while in flight)."""
    store.delete(checked_id(snapshot_id))
    return Response(status_code=204)


@router.put(
    "/profiles/{snapshot_id}/pin", response_model=SnapshotPublic, dependencies=[CaptureRequired]
)
def pin_profile(snapshot_id: SnapshotId, settings: SettingsDep, store: StoreDep) -> SnapshotPublic:
    """Pin a snapshot, so retention never evicts it (no baseline: `PUT .../baseline` sets one)."""
    return SnapshotPublic.of(store.set_pinned(checked_id(snapshot_id), True), settings.report)


@router.delete(
    "/profiles/{snapshot_id}/pin", response_model=SnapshotPublic, dependencies=[CaptureRequired]
)
def unpin_profile(
    snapshot_id: SnapshotId, settings: SettingsDep, store: StoreDep
) -> SnapshotPublic:
    """Unpin a snapshot, so retention may evict it again."""
    return SnapshotPublic.of(store.set_pinned(checked_id(snapshot_id), False), settings.report)


def parse_labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _LABEL_NAME.match(name) or not value or len(value) > 128:
            raise InvalidRequest(
                f"label {item!r} must look like name=value (name: [A-Za-z_][A-Za-z0-9_]*)"
            )
        labels[name] = value
    return labels
