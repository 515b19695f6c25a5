"""What the sidecar's metrics ask of its store's index, as a protocol (`StoreTotals`): they are
handed the index's queries through it (`SnapshotStore.totals`: index_queries.py) and depend on
nothing else of it."""

from __future__ import annotations

from typing import Protocol

__all__ = ["StoreTotals"]


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
