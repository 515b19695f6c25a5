"""retention.select_evictions: oldest unpinned first, staging never counted nor evicted."""

from __future__ import annotations

from profiler_service.store.index import IndexEntry
from profiler_service.store.retention import select_evictions

BIG = 10**12


def entry(
    snapshot_id: str,
    minute: int,
    *,
    size: int = 100,
    pinned: bool = False,
    location: str = "ready",
) -> IndexEntry:
    return IndexEntry(
        id=snapshot_id,
        location=location,
        created_at=f"2024-05-01T12:{minute:02d}:00+00:00",
        size_bytes=size,
        pinned=pinned,
        doc_mtime_ns=1,
    )


def test_nothing_evicted_within_budgets():
    entries = [entry("a", 0), entry("b", 1), entry("c", 2)]
    assert select_evictions(entries, max_count=3, max_bytes=300) == []


def test_count_budget_evicts_oldest_first():
    entries = [entry("c", 2), entry("a", 0), entry("e", 4), entry("b", 1), entry("d", 3)]
    assert select_evictions(entries, max_count=3, max_bytes=BIG) == ["a", "b"]


def test_byte_budget_evicts_oldest_until_total_fits():
    entries = [entry("a", 0, size=400), entry("b", 1, size=300), entry("c", 2, size=200)]
    assert select_evictions(entries, max_count=100, max_bytes=500) == ["a"]
    assert select_evictions(entries, max_count=100, max_bytes=199) == ["a", "b", "c"]


def test_both_budgets_must_hold():
    entries = [entry("a", 0, size=10), entry("b", 1, size=10), entry("c", 2, size=1000)]
    # The count alone would evict only "a"; the bytes need "c" gone too, oldest first.
    assert select_evictions(entries, max_count=2, max_bytes=500) == ["a", "b", "c"]


def test_pinned_entries_are_skipped_and_next_oldest_go():
    entries = [entry("a", 0, pinned=True), entry("b", 1), entry("c", 2), entry("d", 3)]
    assert select_evictions(entries, max_count=2, max_bytes=BIG) == ["b", "c"]


def test_pinned_entries_are_kept_even_when_budget_stays_exceeded():
    entries = [entry("a", 0, pinned=True), entry("b", 1, pinned=True), entry("c", 2)]
    assert select_evictions(entries, max_count=1, max_bytes=BIG) == ["c"]
    only_pinned = [entry("a", 0, pinned=True, size=10**6), entry("b", 1, pinned=True)]
    assert select_evictions(only_pinned, max_count=1, max_bytes=10) == []


def test_staging_entries_are_neither_counted_nor_evicted():
    entries = [
        entry("old-inflight", 0, location="staging", size=10**9),
        entry("b", 1),
        entry("c", 2),
    ]
    assert select_evictions(entries, max_count=2, max_bytes=200) == []
    assert select_evictions(entries, max_count=1, max_bytes=BIG) == ["b"]


def test_failed_entries_count_and_are_evicted_like_ready_ones():
    entries = [entry("a", 0, location="failed"), entry("b", 1), entry("c", 2, location="failed")]
    assert select_evictions(entries, max_count=2, max_bytes=BIG) == ["a"]


def test_ties_on_created_at_are_broken_by_id():
    entries = [entry("b", 0), entry("a", 0), entry("c", 0)]
    assert select_evictions(entries, max_count=1, max_bytes=BIG) == ["a", "b"]


def test_empty_input_evicts_nothing():
    assert select_evictions([], max_count=1, max_bytes=1) == []
