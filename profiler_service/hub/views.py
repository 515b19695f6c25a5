"""The fleet page: every job's latest verdict, its step time over the last days, whether it
regressed against its baseline, and the findings counted by rule. Read in SQL from the index's
columns (hub/index/fleet_queries.py: rows per job, not per snapshot); no snapshot.json.

A job is its workload (the snapshot's `workload`: the chart's release, or the pod's owner), in
its namespace, and the target it profiles: (namespace, workload, target). Every chart release
names its target `trainer`, so the target alone would merge two jobs of one namespace into one
row, one baseline and one step-time line; a snapshot without a workload (an older sidecar, or
none set) is keyed by its target as before. Its baseline is the one its sidecar set (`PUT
/profiles/{id}/baseline`, copied to the bucket: store/baselines.py), even older than the
window; else its newest pinned snapshot, else its oldest snapshot of the window. It regressed
when its latest step time exceeds the baseline's by more than `regression_max_share` (10 %).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from profiler_service.across.compare import regressed
from profiler_service.config import ReportSettings
from profiler_service.exporters import fleet_charts
from profiler_service.exporters.report import SEVERITY_COLOURS, templates
from profiler_service.hub.explain import ExplainState
from profiler_service.hub.index.fleet_queries import FleetQueries, FleetRow
from profiler_service.hub.ledger import Ledger
from profiler_service.sidecar_record import SidecarRecord
from profiler_service.tenancy import Reach

__all__ = ["FleetView", "FleetViewCache", "JobView", "fleet_view", "render_fleet"]

DEFAULT_DAYS = 7


@dataclass
class JobView:
    namespace: str | None
    workload: str | None
    target: str
    latest: FleetRow
    points: list[tuple[datetime, float]] = field(default_factory=list)
    baseline: FleetRow | None = None
    step_time_ratio: float | None = None  # latest / baseline
    regressed: bool = False
    findings_by_rule: dict[str, int] = field(default_factory=dict)
    snapshots: int = 0  # ready, in the window

    @property
    def key(self) -> str:
        """`namespace/workload/target`, or `namespace/target` without a workload."""
        return "/".join([self.namespace or "", *([self.workload] if self.workload else []),
                         self.target])  # fmt: skip


@dataclass
class FleetView:
    start: datetime
    end: datetime
    jobs: list[JobView]
    findings_by_rule: dict[str, int]
    snapshots: int
    # (namespace, workload, target, rule, severity) -> (snapshots, the newest's id, created_at)
    findings: dict[tuple[str, str, str, str, str], tuple[int, str, str]] = field(
        default_factory=dict
    )

    def within(self, reach: Reach) -> FleetView:
        """The view of the namespaces `reach` allows: their jobs, and the counts over them."""
        if reach.everywhere:
            return self
        jobs = reach.keep(self.jobs, lambda j: j.namespace)
        by_rule: dict[str, int] = {}
        for job in jobs:
            for rule, n in job.findings_by_rule.items():
                by_rule[rule] = by_rule.get(rule, 0) + n
        by_rule = dict(sorted(by_rule.items(), key=lambda kv: (-kv[1], kv[0])))
        findings = {k: v for k, v in self.findings.items() if reach.allows(k[0] or None)}
        snapshots = sum(j.snapshots for j in jobs)
        return FleetView(self.start, self.end, jobs, by_rule, snapshots, findings)


class FleetViewCache:
    """The default window's view, rebuilt only when the index changed (a sync) or after
    `max_age_s`: over 10,000 snapshots one view costs ~150 ms, and the page and every scrape
    read it."""

    def __init__(
        self,
        index: FleetQueries,
        settings: ReportSettings,
        baselines: Callable[[], Collection[str]] = frozenset,
        max_age_s: float = 60.0,
    ):
        self.index, self.settings, self.max_age_s = index, settings, max_age_s
        self.baselines = baselines
        self._lock = threading.Lock()
        self._key: object = None
        self._view: FleetView | None = None
        self._built_s = 0.0

    def get(self, version: object) -> FleetView:
        return self._get(version, self.max_age_s)

    def refresh(self, version: object) -> None:
        """Rebuild ahead of the readers (hub/metrics.py's `prepare`, after each sync) where the
        index changed or the view is past half its age, so that they seldom wait for one."""
        self._get(version, self.max_age_s / 2)

    def _get(self, version: object, max_age_s: float) -> FleetView:
        with self._lock:
            fresh = time.monotonic() - self._built_s < max_age_s
            if self._view is None or self._key != version or not fresh:
                self._view = fleet_view(self.index, self.settings, baselines=self.baselines())
                self._key, self._built_s = version, time.monotonic()
            return self._view


def fleet_view(
    index: FleetQueries,
    settings: ReportSettings,
    days: float = DEFAULT_DAYS,
    baselines: Collection[str] = frozenset(),
) -> FleetView:
    """`baselines`: the snapshots sidecars made their jobs' baselines (each names its job)."""
    end = datetime.now(UTC)
    start = end - timedelta(days=days)
    found = index.jobs(start)
    points = index.points(start)
    rule_counts = index.rule_counts(start)
    declared = {
        (r.namespace, r.workload, r.target): r for r in map(index.fleet_row, baselines) if r
    }
    jobs, by_rule = [], {}
    for (namespace, workload, target), rows in sorted(
        found.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "", kv[0][2])
    ):
        key = (namespace, workload, target)
        job = JobView(namespace, workload, target, latest=rows.latest, snapshots=rows.snapshots)
        job.points = points.get(key, [])
        chosen = declared.get(key)
        if chosen is not None and chosen.id == rows.latest.id:
            chosen = None
        pinned = [r for r in rows.pinned if r.id != rows.latest.id]
        oldest = rows.oldest if rows.snapshots > 1 else None
        job.baseline = chosen or (pinned[0] if pinned else oldest)
        base, head = job.baseline, job.latest
        if base is not None and base.step_time_ms and head.step_time_ms is not None:
            job.step_time_ratio = head.step_time_ms / base.step_time_ms
            job.regressed = bool(regressed(job.step_time_ratio, settings.regression_max_share))
        job.findings_by_rule = dict(sorted(rule_counts.get(key, {}).items()))
        for rule, n in job.findings_by_rule.items():
            by_rule[rule] = by_rule.get(rule, 0) + n
        jobs.append(job)
    by_rule = dict(sorted(by_rule.items(), key=lambda kv: (-kv[1], kv[0])))
    findings = {
        key: (count.snapshots, count.newest_id, count.newest_at)
        for key, count in index.finding_counts(start).items()
    }
    return FleetView(start, end, jobs, by_rule, sum(j.snapshots for j in jobs), findings)


def render_fleet(
    view: FleetView,
    sidecars: list[SidecarRecord],
    settings: ReportSettings,
    ledger: Ledger | None = None,
    *,
    explain: tuple[ExplainState, dict[str, float] | None] | None = None,
    limit: int = 200,
    offset: int = 0,
    query: dict[str, object] | None = None,
) -> str:
    """The page shows `limit` jobs from `offset`, the regressed first, and as many sidecars:
    5,000 jobs are a 3.5 MB page that took 0.3 s to render, and no one reads it whole.
    `query`: the request's other parameters, kept by the links to the pages before and after.
    `explain`: the captures asked for the ledger's idle hours, with the idle and no_capture
    hours of their window."""
    ordered = sorted(view.jobs, key=lambda j: not j.regressed)
    kept = {k: v for k, v in (query or {}).items() if v is not None}

    def page(at: int) -> str:
        return "?" + urlencode({**kept, "offset": at, "limit": limit})

    previous = page(max(offset - limit, 0)) if offset > 0 else None
    following = page(offset + limit) if offset + limit < len(ordered) else None
    return (
        templates()
        .get_template("fleet.html")
        .render(
            v=view,
            jobs=ordered[offset : offset + limit],
            offset=offset,
            previous_page=previous,
            next_page=following,
            sidecars=sidecars[:limit],
            sidecars_total=len(sidecars),
            charts=fleet_charts,
            severity_colours=SEVERITY_COLOURS,
            regression_max_share=settings.regression_max_share,
            ledger=ledger,
            idle_bars=[(n.namespace or "(none)", n.idle_by_cause) for n in ledger.namespaces[:15]]
            if ledger
            else [],
            cause_colours=fleet_charts.IDLE_CAUSE_COLOURS,
            explain=explain[0] if explain else None,
            explain_hours=explain[1] if explain else None,
        )
    )
