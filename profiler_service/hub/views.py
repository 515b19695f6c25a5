"""The fleet page: every job's latest verdict, its step time over the last days, whether it
regressed against its baseline, and the findings counted by rule. Index columns only: the page
reads no snapshot.json.

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

from profiler_service.analysis.compare import regressed
from profiler_service.config import ReportSettings
from profiler_service.exporters import charts
from profiler_service.exporters.report import SEVERITY_COLOURS, _environment
from profiler_service.hub.ledger import Ledger
from profiler_service.hub.registry import SidecarRecord
from profiler_service.store.queries import FleetIndex, FleetRow
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
    rows: list[FleetRow] = field(default_factory=list, repr=False)  # oldest first
    # (namespace, workload, target, rule, severity) -> (snapshots, the newest's id, created_at)
    findings: dict[tuple[str, str, str, str, str], tuple[int, str, str]] = field(
        default_factory=dict
    )

    def within(self, reach: Reach) -> FleetView:
        """The view of the namespaces `reach` allows: their jobs, and the counts over them."""
        if reach.everywhere:
            return self
        jobs = reach.keep(self.jobs, lambda j: j.namespace)
        rows = reach.keep(self.rows, lambda r: r.namespace)
        by_rule: dict[str, int] = {}
        for job in jobs:
            for rule, n in job.findings_by_rule.items():
                by_rule[rule] = by_rule.get(rule, 0) + n
        by_rule = dict(sorted(by_rule.items(), key=lambda kv: (-kv[1], kv[0])))
        findings = {k: v for k, v in self.findings.items() if reach.allows(k[0] or None)}
        return FleetView(self.start, self.end, jobs, by_rule, len(rows), rows, findings)


class FleetViewCache:
    """The default window's view, rebuilt only when the index changed (a sync) or after
    `max_age_s`: over 10,000 snapshots one view costs ~150 ms, and the page and every scrape
    read it."""

    def __init__(
        self,
        index: FleetIndex,
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
        with self._lock:
            fresh = time.monotonic() - self._built_s < self.max_age_s
            if self._view is None or self._key != version or not fresh:
                self._view = fleet_view(self.index, self.settings, baselines=self.baselines())
                self._key, self._built_s = version, time.monotonic()
            return self._view


def fleet_view(
    index: FleetIndex,
    settings: ReportSettings,
    days: float = DEFAULT_DAYS,
    baselines: Collection[str] = frozenset(),
) -> FleetView:
    """`baselines`: the snapshots sidecars made their jobs' baselines (each names its job)."""
    end = datetime.now(UTC)
    start = end - timedelta(days=days)
    rows = index.fleet_rows(start)
    declared = {
        (r.namespace, r.workload, r.target): r for r in map(index.fleet_row, baselines) if r
    }
    grouped: dict[tuple[str | None, str | None, str], list[FleetRow]] = {}
    for row in rows:
        grouped.setdefault((row.namespace, row.workload, row.target), []).append(row)
    jobs, by_rule, findings = [], {}, {}
    for (namespace, workload, target), its in sorted(
        grouped.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "", kv[0][2])
    ):
        job = JobView(namespace, workload, target, latest=its[-1])
        job.points = [
            (datetime.fromisoformat(r.created_at), r.step_time_ms)
            for r in its
            if r.step_time_ms is not None
        ]
        chosen = declared.get((namespace, workload, target))
        if chosen is not None and chosen.id == its[-1].id:
            chosen = None
        pinned = [r for r in its if r.pinned and r is not its[-1]]
        job.baseline = chosen or (pinned[-1] if pinned else (its[0] if len(its) > 1 else None))
        base, head = job.baseline, job.latest
        if base is not None and base.step_time_ms and head.step_time_ms is not None:
            job.step_time_ratio = head.step_time_ms / base.step_time_ms
            job.regressed = bool(regressed(job.step_time_ratio, settings.regression_max_share))
        for r in its:
            for rule in r.rules.split():
                job.findings_by_rule[rule] = job.findings_by_rule.get(rule, 0) + 1
                by_rule[rule] = by_rule.get(rule, 0) + 1
            for token in r.findings.split():
                rule, _, severity = token.rpartition(":")
                k = (namespace or "", workload or "", target, rule, severity)
                findings[k] = (findings.get(k, (0,))[0] + 1, r.id, r.created_at)
        jobs.append(job)
    by_rule = dict(sorted(by_rule.items(), key=lambda kv: (-kv[1], kv[0])))
    return FleetView(start, end, jobs, by_rule, len(rows), rows, findings)


def render_fleet(
    view: FleetView,
    sidecars: list[SidecarRecord],
    settings: ReportSettings,
    ledger: Ledger | None = None,
) -> str:
    return (
        _environment()
        .get_template("fleet.html")
        .render(
            v=view,
            sidecars=sidecars,
            charts=charts,
            severity_colours=SEVERITY_COLOURS,
            regression_max_share=settings.regression_max_share,
            ledger=ledger,
            idle_bars=[(n.namespace or "(none)", n.idle_by_cause) for n in ledger.namespaces[:15]]
            if ledger
            else [],
            cause_colours=charts.IDLE_CAUSE_COLOURS,
        )
    )
