"""Which snapshots to evict so the store stays within its count and byte budgets."""

from __future__ import annotations

from collections.abc import Iterable

from profiler_service.store.index import IndexEntry


def select_evictions(entries: Iterable[IndexEntry], *, max_count: int, max_bytes: int) -> list[str]:
    """Oldest unpinned first, until both budgets hold; pinned snapshots are never chosen.

    In-flight snapshots (location `staging`) are neither counted nor evicted.
    """
    kept = sorted(
        (e for e in entries if e.location != "staging"), key=lambda e: (e.created_at, e.id)
    )
    count, total_bytes = len(kept), sum(e.size_bytes for e in kept)
    evicted = []
    for entry in kept:
        if count <= max_count and total_bytes <= max_bytes:
            break
        if entry.pinned:
            continue
        evicted.append(entry.id)
        count -= 1
        total_bytes -= entry.size_bytes
    return evicted
