"""Response shapes of the HTTP API."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from profiler_service import __version__
from profiler_service.config import ReportSettings
from profiler_service.exporters.links import SnapshotLinks, snapshot_links
from profiler_service.models import Snapshot, SnapshotHead, as_utc, is_snapshot_id
from profiler_service.store.list_items import COUNT_CAP, ListedSnapshot


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


class FailedSnapshotPublic(ErrorPublic):
    """`POST /profile?wait=true` whose snapshot failed: the API's error shape (`error` is the
    snapshot's error code), with the failed snapshot (its id, links, kept files)."""

    snapshot: SnapshotPublic


class SnapshotListItem(ListedSnapshot):
    """A snapshot in `GET /profiles`: everything but its summary, lead-up and findings'
    evidence (20-40 KB of a snapshot.json, a few hundred bytes here); the whole at
    `links.self`."""

    links: SnapshotLinks


# A listing counts what matched up to this many: past it, `count` says this and `count_capped`
# is true (counting a million rows costs a second; the page itself stays fast at any depth).


class SnapshotsPublic(BaseModel):
    data: list[SnapshotListItem]
    count: int = Field(description=f"how many matched, up to {COUNT_CAP} (see `count_capped`)")
    count_capped: bool = Field(
        False, description=f"more than {COUNT_CAP} matched: `count` is a lower bound"
    )
    limit: int
    offset: int
    next: str | None = Field(
        None,
        description="When the page is full: the `before` of the next page (`<created_at>,<id>` "
        "of its last item; keyset paging, which stays fast however deep it goes)",
    )


def snapshots_page_json(
    docs: list[str], count: int, limit: int, offset: int, settings: ReportSettings
) -> str:
    """A `SnapshotsPublic` as JSON from stored snapshot.json texts: each read as a list item
    (the summary and the lead-up are skipped, not validated) with its links spliced in."""
    items, last = [], None
    for doc in docs:
        item = last = ListedSnapshot.model_validate_json(doc)
        links = snapshot_links(item, settings)
        items.append(f'{item.model_dump_json()[:-1]},"links":{links.model_dump_json()}}}')
    cursor = json.dumps(page_cursor(last)) if last is not None and len(docs) >= limit else "null"
    capped = "true" if count > COUNT_CAP else "false"
    return (
        f'{{"data":[{",".join(items)}],"count":{min(count, COUNT_CAP)},"count_capped":{capped},'
        f'"limit":{limit},"offset":{offset},"next":{cursor}}}'
    )


def page_cursor(item: SnapshotHead) -> str:
    """The keyset of a listed snapshot: what `before` takes to list what is older."""
    return f"{item.created_at.astimezone(UTC).isoformat()},{item.id}"


def parse_cursor(text: str) -> tuple[datetime, str]:
    """`before` as (created_at, id); ValueError when it is not `<ISO 8601 time>,<id>`."""
    when, sep, snapshot_id = text.rpartition(",")
    if not sep or not is_snapshot_id(snapshot_id):
        raise ValueError(f"before {text!r} is not <created_at>,<id> (a page's `next`)")
    created = datetime.fromisoformat(when.replace(" ", "+"))  # a `+` a query string decoded
    return as_utc(created), snapshot_id


class HealthPublic(BaseModel):
    status: str
    checks: dict[str, str] = {}
    version: str = __version__  # the release answering (CHANGELOG.md)


ERROR_RESPONSES: dict[int | str, dict] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 422, 503)
}
