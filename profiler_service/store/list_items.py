"""What a listing holds of a snapshot: its head, its findings' titles and what became of the
job's earlier findings (a few hundred bytes of a 20-40 KB snapshot.json), and how far a listing
counts. The stores' indexes keep this (the hub's, as JSON in a column); the API splices each
item's links in (api/schemas.py), so the data layer needs nothing of the API.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from profiler_service.analysis.models import Severity
from profiler_service.models import Snapshot, SnapshotHead
from profiler_service.verification_record import StepChange, Verification

__all__ = ["COUNT_CAP", "FindingBrief", "ListedSnapshot", "list_item_json"]

# A listing counts its matches up to this (and one past it, to say "more"): counting a million
# rows costs a second.
COUNT_CAP = 1000


class FindingBrief(BaseModel):
    """A finding as a list shows it: what fired and how badly. Its evidence and advice are in
    the snapshot."""

    rule: str = ""
    severity: Severity
    title: str


class ListedSnapshot(SnapshotHead):
    """What a list item reads from a stored snapshot.json: the head, the findings' titles and
    what became of the job's earlier findings (a few hundred bytes)."""

    findings: list[FindingBrief] = Field(default_factory=list)
    previous_id: str | None = None
    verified_against: str | None = None
    verification: list[Verification] = Field(default_factory=list)
    step_change: StepChange | None = None


def list_item_json(snapshot: Snapshot) -> str:
    """What `GET /profiles` lists of a snapshot, as the JSON `snapshots_page_json` splices (the
    hub's database index keeps this, not the whole document)."""
    return ListedSnapshot.model_validate(snapshot, from_attributes=True).model_dump_json()
