"""Baselines and comparisons: `PUT /profiles/{id}/baseline`, `GET /profiles/{id}/compare`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from profiler_service.across.compare import (
    Comparison,
    GateMetric,
    compare,
    parse_threshold,
)
from profiler_service.api.deps import CaptureRequired, ReadRequired, SettingsDep
from profiler_service.api.routes.profiles import SnapshotId, checked_id
from profiler_service.api.schemas import ERROR_RESPONSES
from profiler_service.api.sidecar import StoreDep
from profiler_service.errors import InvalidRequest, NoBaseline
from profiler_service.exporters.links import snapshot_links
from profiler_service.models import Snapshot
from profiler_service.store import SnapshotStore
from profiler_service.store.baselines import label_key, target_key

router = APIRouter(tags=["comparisons"], responses=ERROR_RESPONSES)


class BaselineLinks(BaseModel):
    snapshot: str  # the baseline snapshot, whole
    report: str  # its report page
    baselines: str  # every baseline of this service


class BaselinePublic(BaseModel):
    """The baseline just set: which snapshot `key` is now compared against (a few hundred
    bytes; the snapshot itself, 15-40 KB, is one GET away at `links.snapshot`)."""

    key: str = Field(description="`target:NAME` or `label:NAME=VALUE`")
    snapshot_id: str
    target: str = Field(description="the snapshot's target")
    pinned: bool = Field(description="always true: retention never evicts a baseline")
    compared_by_default: bool = Field(
        description="`GET /profiles/{id}/compare` of the target's snapshots uses it without "
        "`?baseline=` (a target's baseline; a label's is passed as `?baseline=ID`)"
    )
    links: BaselineLinks


class ComparisonPublic(Comparison):
    max_regression: float
    regressed: dict[str, bool | None]  # per gate metric; None when a side lacks the number


@router.put(
    "/profiles/{snapshot_id}/baseline",
    response_model=BaselinePublic,
    dependencies=[CaptureRequired],
)
def set_baseline(
    snapshot_id: SnapshotId,
    settings: SettingsDep,
    store: StoreDep,
    label: Annotated[
        str | None,
        Query(description="baseline of a label (name=value) instead of the snapshot's target"),
    ] = None,
) -> BaselinePublic:
    """Make a ready snapshot the baseline of its target (or of a label); it becomes pinned.

    Answers the baseline record (its key, the snapshot's id and target, links to the snapshot,
    its report and `GET /baselines`), not the snapshot. `GET /profiles/{id}/compare` of the
    target's later snapshots then compares them with it.
    """
    snapshot = store.get(checked_id(snapshot_id))
    try:
        key = label_key(label) if label else target_key(snapshot.target)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    snapshot = store.set_baseline(snapshot.id, key)
    links = snapshot_links(snapshot, settings.report)
    return BaselinePublic(
        key=key,
        snapshot_id=snapshot.id,
        target=snapshot.target,
        pinned=snapshot.pinned,
        compared_by_default=key == target_key(snapshot.target),
        links=BaselineLinks(snapshot=links.self, report=links.report, baselines="/baselines"),
    )


@router.get("/baselines", response_model=dict[str, str], dependencies=[ReadRequired])
def list_baselines(store: StoreDep) -> dict[str, str]:
    """Every baseline: `target:NAME` or `label:NAME=VALUE` -> snapshot id."""
    return store.baselines.all()


@router.get(
    "/profiles/{snapshot_id}/compare",
    response_model=ComparisonPublic,
    dependencies=[ReadRequired],
)
def compare_profile(
    snapshot_id: SnapshotId,
    settings: SettingsDep,
    store: StoreDep,
    baseline: Annotated[
        str | None, Query(description="snapshot id; default: the target's baseline")
    ] = None,
    max_regression: Annotated[
        str | None, Query(description="e.g. 10% (default: PROFILER_REGRESSION_MAX_SHARE)")
    ] = None,
) -> ComparisonPublic:
    """What moved between a baseline and this snapshot, and whether it regressed."""
    head = store.get(checked_id(snapshot_id))
    base = resolve_baseline(store, head, baseline)
    try:
        default = settings.report.regression_max_share
        threshold = parse_threshold(max_regression) if max_regression else default
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    return comparison_public(compare(base, head), threshold)


def resolve_baseline(store: SnapshotStore, head: Snapshot, baseline_id: str | None) -> Snapshot:
    if baseline_id is not None:
        return store.get(checked_id(baseline_id))
    base = store.baseline(target_key(head.target))
    if base is None:
        raise NoBaseline(
            f"target {head.target!r} has no baseline: pass ?baseline=ID, or set one with "
            f"PUT /profiles/ID/baseline"
        )
    return base


def comparison_public(comparison: Comparison, threshold: float) -> ComparisonPublic:
    return ComparisonPublic(
        **comparison.model_dump(),
        max_regression=threshold,
        regressed={m.value: comparison.is_regression(m, threshold) for m in GateMetric},
    )
