"""A listing page of the hub's fleet index: filters, keyset or offset paging, a capped count,
from columns only (the fleet view's reads: fleet_queries.py).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from profiler_service.hub.index.database import FleetDatabase
from profiler_service.hub.index.schema import findings, snapshots
from profiler_service.models import as_utc
from profiler_service.store.index import SnapshotQuery
from profiler_service.store.list_items import COUNT_CAP

__all__ = ["IndexQueries"]

_EQUAL = ("status", "trigger", "target", "pod", "namespace", "workload")


class IndexQueries:
    def __init__(self, db: FleetDatabase):
        self.db = db

    def list_items(self, q: SnapshotQuery) -> tuple[list[str], int]:
        """One page of list items (JSON texts), newest first, and how many matched (counted
        up to `COUNT_CAP` + 1)."""
        if _by_findings_alone(q):
            return self._from_findings(q)
        s = snapshots
        where: list[Any] = [s.c[name] == getattr(q, name) for name in _EQUAL if getattr(q, name)]
        if q.namespaces is not None:
            where.append(s.c.namespace.in_(sorted(q.namespaces)))
        if q.since is not None:
            where.append(s.c.created_at >= as_utc(q.since))
        if q.until is not None:
            where.append(s.c.created_at < as_utc(q.until))
        # The findings filters as `IN (...)`, not a correlated EXISTS: SQLite searched the
        # findings' own index once per snapshot (0.14 s at 2,000 snapshots). The page walks the
        # snapshots newest first and probes each one's findings (1 ms at a million); the count
        # reads the findings' (rule, namespace) index instead, where a namespace is asked: it
        # would otherwise probe every snapshot of the namespace (55 ms for 10,000 of them).
        # Each to its own: given both, PostgreSQL misjudged the page (15-26 ms).
        page_where = where + self._findings_filters(q, by_namespace=False)
        count_where = where + self._findings_filters(q, by_namespace=True)
        page = sa.select(s.c.item).where(*page_where)
        if q.before is not None:
            created, snapshot_id = q.before
            page = page.where(sa.tuple_(s.c.created_at, s.c.id) < (as_utc(created), snapshot_id))
        page = page.order_by(s.c.created_at.desc(), s.c.id.desc()).limit(q.limit).offset(q.offset)
        # Counted up to one past the cap: the page says "more than COUNT_CAP" past it.
        matched = sa.select(s.c.id).where(*count_where).limit(COUNT_CAP + 1).subquery()
        count = sa.select(sa.func.count()).select_from(matched)
        with self.db.connect() as conn:
            items = list(conn.execute(page).scalars())
            total = conn.execute(count).scalar() or 0
        return items, total

    def _from_findings(self, q: SnapshotQuery) -> tuple[list[str], int]:
        """A rule or a severity filter, alone or with the namespace and the time: the findings'
        own index ((rule or severity, namespace, created_at, snapshot_id)) walked newest first
        gives the page's ids and the count, distinct (a snapshot has a row per rule and
        severity), without reading a snapshot but the page's. The `IN (...)` of the general
        case probed each snapshot of the namespace, newest first, for a finding (~180 for a
        page of a rule 28 % of them hold), and counted by probing a snapshot per finding:
        22 ms p50, 75 ms p99 at a million snapshots (bench/bench_hub_database.py)."""
        f, s = findings, snapshots
        value = q.rule if q.rule is not None else q.severity
        where: list[Any] = [(f.c.rule if q.rule is not None else f.c.severity) == value]
        if q.namespace:
            where.append(f.c.namespace == q.namespace)
        if q.since is not None:
            where.append(f.c.created_at >= as_utc(q.since))
        if q.until is not None:
            where.append(f.c.created_at < as_utc(q.until))
        newest_first = (f.c.created_at.desc(), f.c.snapshot_id.desc())
        matched = sa.select(f.c.created_at, f.c.snapshot_id).where(*where).distinct()
        ids = matched
        if q.before is not None:
            created, snapshot_id = q.before
            ids = ids.where(
                sa.tuple_(f.c.created_at, f.c.snapshot_id) < (as_utc(created), snapshot_id)
            )
        ids = ids.order_by(*newest_first).limit(q.limit).offset(q.offset).subquery()
        page = (
            sa.select(s.c.item)
            .join_from(ids, s, s.c.id == ids.c.snapshot_id)
            .order_by(ids.c.created_at.desc(), ids.c.snapshot_id.desc())
        )
        capped = matched.order_by(*newest_first).limit(COUNT_CAP + 1).subquery()
        count = sa.select(sa.func.count()).select_from(capped)
        with self.db.connect() as conn:
            items = list(conn.execute(page).scalars())
            total = conn.execute(count).scalar() or 0
        return items, total

    @staticmethod
    def _findings_filters(q: SnapshotQuery, by_namespace: bool) -> list[Any]:
        """The rule and severity filters; `by_namespace`: their findings' own namespace too."""
        filters: list[Any] = []
        for column, value in ((findings.c.rule, q.rule), (findings.c.severity, q.severity)):
            if value is None:
                continue
            found = sa.select(findings.c.snapshot_id).where(column == value)
            if by_namespace and q.namespace:
                found = found.where(findings.c.namespace == q.namespace)
            if by_namespace and q.namespaces is not None:
                found = found.where(findings.c.namespace.in_(sorted(q.namespaces)))
            filters.append(snapshots.c.id.in_(found))
        return filters


def _by_findings_alone(q: SnapshotQuery) -> bool:
    """One findings filter (rule or severity) and only what a finding's row holds besides
    (namespace, time): the findings answer the page and the count alone."""
    return (
        (q.rule is None) != (q.severity is None)
        and q.namespaces is None
        and not any(getattr(q, name) for name in _EQUAL if name != "namespace")
    )
