"""Reading snapshots: `GET /profiles...`, which a sidecar and the hub both serve. What changes a
sidecar's store (`POST /profile`, deletes, pins): profile_changes.py."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import FileResponse, HTMLResponse, StreamingResponse

from profiler_service.across.compare import compare
from profiler_service.analysis.models import Severity
from profiler_service.analysis.readers.python_stacks import read_library_roots
from profiler_service.api.core import SnapshotReader
from profiler_service.api.deps import ReaderDep, ReadRequired, SettingsDep
from profiler_service.api.schemas import (
    ERROR_RESPONSES,
    SnapshotPublic,
    SnapshotsPublic,
    parse_cursor,
    snapshots_page_json,
)
from profiler_service.errors import FileNotFound, InvalidRequest, SnapshotNotFound
from profiler_service.exporters.report import render_report
from profiler_service.models import (
    Snapshot,
    SnapshotStatus,
    TriggerKind,
    as_utc,
    is_snapshot_id,
)
from profiler_service.probes.python_stacks import SAMPLES_FILE, STACKS_FILE
from profiler_service.store import SnapshotQuery

# The reads: the fleet hub serves them too, over its index of the shared bucket (api/core.py).
read_router = APIRouter(tags=["profiles"], responses=ERROR_RESPONSES, dependencies=[ReadRequired])

SnapshotId = Annotated[str, Path(description="snapshot id, e.g. 20261202-164155-default-a1b2c3")]


def checked_id(snapshot_id: str) -> str:
    if not is_snapshot_id(snapshot_id):
        raise SnapshotNotFound(f"no snapshot with id {snapshot_id!r}")
    return snapshot_id


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
    before: Annotated[
        str | None,
        Query(
            description="only what is older than this `<created_at>,<id>`: the previous page's "
            "`next` (keyset paging; fast at any depth, where a large `offset` is not)",
            max_length=200,
        ),
    ] = None,
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
            since=None if since is None else as_utc(since),
            until=None if until is None else as_utc(until),
            limit=limit,
            offset=offset,
            before=_cursor(before),
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
    return render_report(snapshot, settings.report, comparison, _python_stacks(store, snapshot))


def _python_stacks(store: SnapshotReader, snapshot: Snapshot) -> tuple[str, list[str]] | None:
    """The snapshot's collapsed stacks and its Python's library roots (from its disk, or the
    shared object store for the hub and another sidecar's snapshot); None where it has none."""
    if snapshot.summary is None or snapshot.summary.python_stacks is None:
        return None
    folded = _text_of(store, snapshot.id, STACKS_FILE)
    if folded is None:
        return None
    samples = _text_of(store, snapshot.id, SAMPLES_FILE)
    return folded, read_library_roots(samples) if samples else []


def _text_of(store: SnapshotReader, snapshot_id: str, name: str) -> str | None:
    try:
        return store.file_path(snapshot_id, name).read_text(encoding="utf-8", errors="replace")
    except FileNotFound:
        pass
    try:
        _, chunks = store.remote_file(snapshot_id, name)
    except FileNotFound:
        return None
    return b"".join(chunks).decode("utf-8", errors="replace")


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


def _cursor(before: str | None) -> tuple[datetime, str] | None:
    if before is None:
        return None
    try:
        return parse_cursor(before)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
