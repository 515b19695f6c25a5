"""Response shapes of the HTTP API."""

from __future__ import annotations

from pydantic import BaseModel

from profiler_service.config import ReportSettings
from profiler_service.exporters.links import LinkSource, SnapshotLinks, snapshot_links
from profiler_service.models import Snapshot


class ErrorPublic(BaseModel):
    error: str
    detail: str


class SnapshotPublic(Snapshot):
    links: SnapshotLinks

    @classmethod
    def of(cls, snapshot: Snapshot, settings: ReportSettings, base_url: str = "") -> SnapshotPublic:
        # Built without validating again: the snapshot is valid (a page of 50 would cost ~30 ms).
        return cls.model_construct(
            **{name: getattr(snapshot, name) for name in Snapshot.model_fields},
            links=snapshot_links(snapshot, settings, base_url),
        )


class SnapshotsPublic(BaseModel):
    data: list[SnapshotPublic]
    count: int
    limit: int
    offset: int


def snapshots_page_json(
    docs: list[str], count: int, limit: int, offset: int, settings: ReportSettings
) -> str:
    """A `SnapshotsPublic` as JSON, spliced from stored snapshot.json texts (each already holds
    what `SnapshotPublic` has but its links): a page of 50 costs milliseconds, not a parse and a
    validation of every snapshot."""
    items = []
    for doc in docs:
        links = snapshot_links(LinkSource.model_validate_json(doc), settings)
        head = doc.rstrip()
        items.append(f'{head[:-1]},"links":{links.model_dump_json()}}}')
    return f'{{"data":[{",".join(items)}],"count":{count},"limit":{limit},"offset":{offset}}}'


class HealthPublic(BaseModel):
    status: str
    checks: dict[str, str] = {}


ERROR_RESPONSES: dict[int | str, dict] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 422, 503)
}
