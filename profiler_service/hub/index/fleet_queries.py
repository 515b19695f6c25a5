"""The fleet view's reads, in SQL (hub/views.py builds the page and the metrics from them): per
job its latest snapshot and baseline candidates, its step-time points, its findings counted
by rule and severity; and the snapshots by namespace and status, as the last sync counted
them. Each query's size follows the jobs, not the snapshots: a window of 10,000 snapshots
from 5,000 jobs is 5,000 rows of jobs, not a pass over 10,000 in Python.

A job is (namespace, workload, target), a missing namespace or workload being its own value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from profiler_service.hub.index.database import FleetDatabase
from profiler_service.hub.index.schema import findings, snapshot_counts, snapshots
from profiler_service.models import as_utc

__all__ = ["FindingCount", "FleetQueries", "FleetRow", "JobKey", "JobRows"]

JobKey = tuple[str | None, str | None, str]  # namespace, workload, target

s = snapshots
_COLUMNS = [
    s.c[name]
    for name in (
        "id", "namespace", "target", "pod", "created_at", "step_time_ms", "bottleneck", "rules",
        "findings", "pinned", "workload", "gpu_waste",
    )
]  # fmt: skip
_JOB = (sa.func.coalesce(s.c.namespace, ""), sa.func.coalesce(s.c.workload, ""), s.c.target)
_NEWEST_FIRST = (s.c.created_at.desc(), s.c.id.desc())


@dataclass(frozen=True)
class FleetRow:
    """One ready snapshot as the fleet page and metrics read it (index columns only)."""

    id: str
    namespace: str | None
    target: str
    pod: str | None
    created_at: str
    step_time_ms: float | None
    bottleneck: str | None
    rules: str
    findings: str  # rule:severity ...
    pinned: bool
    workload: str | None = None
    gpu_waste: str | None = None  # CaptureWaste JSON (analysis/gpu_waste.py)


@dataclass
class JobRows:
    """A job's snapshots in the window as the page needs them."""

    latest: FleetRow
    snapshots: int
    oldest: FleetRow
    pinned: list[FleetRow] = field(default_factory=list)  # its two newest pinned, newest first


@dataclass(frozen=True)
class FindingCount:
    snapshots: int  # ready snapshots of the job with this finding (rule and severity)
    newest_id: str
    newest_at: str


def _row(values: Any) -> FleetRow:
    values = list(values)
    values[4] = as_utc(values[4]).isoformat()
    values[9] = bool(values[9])
    return FleetRow(*values)


def _key(namespace: str, workload: str, target: str) -> JobKey:
    return namespace or None, workload or None, target


def _ready_since(since: datetime) -> tuple[Any, ...]:
    return s.c.status == "ready", s.c.created_at >= as_utc(since)


class FleetQueries:
    def __init__(self, db: FleetDatabase):
        self.db = db

    def jobs(self, since: datetime) -> dict[JobKey, JobRows]:
        """Each job with a ready snapshot since `since`: its latest, oldest and newest pinned."""
        window = sa.select(
            *_COLUMNS,
            *_JOB,
            sa.func.row_number().over(partition_by=_JOB, order_by=_NEWEST_FIRST).label("newest"),
            sa.func.row_number()
            .over(partition_by=_JOB, order_by=(s.c.created_at, s.c.id))
            .label("oldest"),
            sa.func.count().over(partition_by=_JOB).label("n"),
            sa.func.row_number()
            .over(partition_by=(*_JOB, s.c.pinned), order_by=_NEWEST_FIRST)
            .label("pinned_rank"),
        ).where(*_ready_since(since))
        w = window.subquery()
        query = sa.select(w).where(
            sa.or_(w.c.newest == 1, w.c.oldest == 1, sa.and_(w.c.pinned, w.c.pinned_rank <= 2))
        )
        found: dict[JobKey, dict[str, Any]] = {}
        with self.db.connect() as conn:
            for r in conn.execute(query):
                row, (namespace, workload, target, newest, oldest, n, rank) = _row(r[:12]), r[12:]
                job = found.setdefault(_key(namespace, workload, target), {"pinned": {}, "n": n})
                if newest == 1:
                    job["latest"] = row
                if oldest == 1:
                    job["oldest"] = row
                if row.pinned and rank <= 2:
                    job["pinned"][rank] = row
        return {
            key: JobRows(
                j["latest"], j["n"], j["oldest"], [j["pinned"][k] for k in sorted(j["pinned"])]
            )
            for key, j in found.items()
        }

    def points(self, since: datetime) -> dict[JobKey, list[tuple[datetime, float]]]:
        """Each job's (created_at, step time) since `since`, oldest first."""
        query = (
            sa.select(*_JOB, s.c.created_at, s.c.step_time_ms)
            .where(*_ready_since(since), s.c.step_time_ms.is_not(None))
            .order_by(s.c.created_at, s.c.id)
        )
        points: dict[JobKey, list[tuple[datetime, float]]] = {}
        with self.db.connect() as conn:
            for namespace, workload, target, created, step in conn.execute(query):
                points.setdefault(_key(namespace, workload, target), []).append(
                    (as_utc(created), step)
                )
        return points

    def finding_counts(self, since: datetime) -> dict[tuple[str, str, str, str, str], FindingCount]:
        """(namespace, workload, target, rule, severity), '' for none -> the ready snapshots
        since `since` with such a finding, and the newest of them."""
        f = findings
        group = (*_JOB, f.c.rule, f.c.severity)
        window = (
            sa.select(
                *group,
                s.c.id,
                s.c.created_at,
                sa.func.count().over(partition_by=group).label("n"),
                sa.func.row_number().over(partition_by=group, order_by=_NEWEST_FIRST).label("rn"),
            )
            .select_from(f.join(s, f.c.snapshot_id == s.c.id))
            .where(*_ready_since(since))
            .subquery()
        )
        query = sa.select(window).where(window.c.rn == 1)
        with self.db.connect() as conn:
            return {
                tuple(r[:5]): FindingCount(r[7], r[5], as_utc(r[6]).isoformat())
                for r in conn.execute(query)
            }

    def rule_counts(self, since: datetime) -> dict[JobKey, dict[str, int]]:
        """Each job's ready snapshots since `since` with a finding of each rule."""
        f = findings
        query = (
            sa.select(*_JOB, f.c.rule, sa.func.count(sa.distinct(f.c.snapshot_id)))
            .select_from(f.join(s, f.c.snapshot_id == s.c.id))
            .where(*_ready_since(since))
            .group_by(*_JOB, f.c.rule)
        )
        counts: dict[JobKey, dict[str, int]] = {}
        with self.db.connect() as conn:
            for namespace, workload, target, rule, n in conn.execute(query):
                counts.setdefault(_key(namespace, workload, target), {})[rule] = n
        return counts

    def ledger_rows(self, since: datetime) -> list[FleetRow]:
        """What the ledger reads of the ready snapshots since `since`, oldest first: each with
        the GPU's waste (analysis/gpu_waste.py), and the newest of each pod (which job a pod
        Prometheus counts belongs to); not the captures of CPUs in between."""
        pod = (s.c.namespace, s.c.pod)
        window = (
            sa.select(
                *_COLUMNS,
                sa.func.row_number().over(partition_by=pod, order_by=_NEWEST_FIRST).label("rn"),
            )
            .where(*_ready_since(since))
            .subquery()
        )
        query = (
            sa.select(*[window.c[c.name] for c in _COLUMNS])
            .where(sa.or_(window.c.gpu_waste.is_not(None), window.c.rn == 1))
            .order_by(window.c.created_at, window.c.id)
        )
        with self.db.connect() as conn:
            return [_row(r) for r in conn.execute(query)]

    def fleet_row(self, snapshot_id: str) -> FleetRow | None:
        """One ready snapshot, whenever it was taken (a baseline older than the window)."""
        query = sa.select(*_COLUMNS).where(s.c.status == "ready", s.c.id == snapshot_id)
        with self.db.connect() as conn:
            row = conn.execute(query).first()
        return _row(row) if row else None

    def count_by_status(self) -> list[tuple[str | None, str, int]]:
        """(namespace, status, snapshots), as the last sync that changed the index counted."""
        c = snapshot_counts
        with self.db.connect() as conn:
            rows = conn.execute(sa.select(c.c.namespace, c.c.status, c.c.snapshots)).all()
        return [(namespace or None, status, n) for namespace, status, n in rows]
