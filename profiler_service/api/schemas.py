"""Response shapes of the HTTP API."""

from __future__ import annotations

from pydantic import BaseModel, Field

from profiler_service.analysis.models import Severity
from profiler_service.analysis.verification import StepChange, Verification
from profiler_service.config import ReportSettings
from profiler_service.exporters.links import SnapshotLinks, snapshot_links
from profiler_service.models import Snapshot, SnapshotHead


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


class FindingBrief(BaseModel):
    """A finding as a list shows it: what fired and how badly. Its evidence and advice are in
    the snapshot."""

    rule: str = ""
    severity: Severity
    title: str


class _Listed(SnapshotHead):
    """What a list item reads from a stored snapshot.json: the head, the findings' titles and
    what became of the job's earlier findings (a few hundred bytes)."""

    findings: list[FindingBrief] = Field(default_factory=list)
    previous_id: str | None = None
    verified_against: str | None = None
    verification: list[Verification] = Field(default_factory=list)
    step_change: StepChange | None = None


class SnapshotListItem(_Listed):
    """A snapshot in `GET /profiles`: everything but its summary, lead-up and findings'
    evidence (20-40 KB of a snapshot.json, a few hundred bytes here); the whole at
    `links.self`."""

    links: SnapshotLinks


class SnapshotsPublic(BaseModel):
    data: list[SnapshotListItem]
    count: int
    limit: int
    offset: int


def snapshots_page_json(
    docs: list[str], count: int, limit: int, offset: int, settings: ReportSettings
) -> str:
    """A `SnapshotsPublic` as JSON from stored snapshot.json texts: each read as a list item
    (the summary and the lead-up are skipped, not validated) with its links spliced in."""
    items = []
    for doc in docs:
        item = _Listed.model_validate_json(doc)
        links = snapshot_links(item, settings)
        items.append(f'{item.model_dump_json()[:-1]},"links":{links.model_dump_json()}}}')
    return f'{{"data":[{",".join(items)}],"count":{count},"limit":{limit},"offset":{offset}}}'


class HealthPublic(BaseModel):
    status: str
    checks: dict[str, str] = {}


ERROR_RESPONSES: dict[int | str, dict] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 422, 503)
}
