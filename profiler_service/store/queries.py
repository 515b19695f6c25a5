"""What the store's readers beyond the API ask of its index, as protocols: the sidecar's metrics
(`StoreTotals`) and the fleet hub's page, metrics and ledger (`FleetIndex`). They are handed the
index's queries through these (`SnapshotStore.totals`, `SnapshotStore.fleet`: index_queries.py)
and depend on nothing else of it, so another index (the hub's shared one, on a database) answers
them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["FleetIndex", "FleetRow", "StoreTotals"]


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


class StoreTotals(Protocol):
    def totals_by_status(self) -> list[tuple[str, int, int, int]]:
        """(status, snapshots, bytes, pinned) per status of this store's own snapshots."""
        ...

    def latest_ready(self) -> dict[str, tuple[str, str]]:
        """{target: (id, created_at)} of each target's newest ready snapshot."""
        ...

    def doc(self, snapshot_id: str) -> str | None:
        """The stored snapshot.json text, unparsed."""
        ...


class FleetIndex(Protocol):
    def fleet_rows(self, since: datetime) -> list[FleetRow]:
        """Every ready snapshot created since `since`, oldest first."""
        ...

    def fleet_row(self, snapshot_id: str) -> FleetRow | None:
        """One ready snapshot as `fleet_rows` reads it, whenever it was taken (a baseline)."""
        ...

    def count_by_status(self) -> list[tuple[str | None, str, int]]:
        """(namespace, status, snapshots) of every snapshot indexed."""
        ...
