"""Response shapes of the HTTP API."""

from __future__ import annotations

from pydantic import BaseModel

from profiler_service.config import Settings
from profiler_service.exporters.links import SnapshotLinks, snapshot_links
from profiler_service.models import Snapshot


class ErrorPublic(BaseModel):
    error: str
    detail: str


class SnapshotPublic(Snapshot):
    links: SnapshotLinks

    @classmethod
    def of(cls, snapshot: Snapshot, settings: Settings, base_url: str = "") -> SnapshotPublic:
        return cls(
            **snapshot.model_dump(exclude={"size_bytes", "hosts"}),
            links=snapshot_links(snapshot, settings, base_url),
        )


class SnapshotsPublic(BaseModel):
    data: list[SnapshotPublic]
    count: int
    limit: int
    offset: int


class HealthPublic(BaseModel):
    status: str
    checks: dict[str, str] = {}


ERROR_RESPONSES: dict[int | str, dict] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 422, 503)
}
