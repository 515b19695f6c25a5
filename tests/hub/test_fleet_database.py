"""The hub's fleet index on SQLite and on a real PostgreSQL server (tests/postgres_server.py):
the migrations build exactly the schema the code declares, listings filter and page (keyset
and offset) as a plain filter of the snapshots would, one replica at a time holds the sync's
lease and a killed one lets go, and syncs of a real S3 API (moto) list only what is new.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fleet_samples import fleet_snapshot, put
from helpers import free_port
from s3_server import S3Server, wait_until

from profiler_service.analysis.models import Severity
from profiler_service.api.schemas import (
    COUNT_CAP,
    page_cursor,
    parse_cursor,
    snapshots_page_json,
)
from profiler_service.config import ReportSettings
from profiler_service.hub.index.database import FleetDatabase, database_url
from profiler_service.hub.index.fleet_queries import FleetQueries
from profiler_service.hub.index.queries import IndexQueries
from profiler_service.hub.index.schema import metadata
from profiler_service.hub.index.sync import IndexSync
from profiler_service.hub.index.writes import IndexWrites
from profiler_service.models import Snapshot, SnapshotStatus
from profiler_service.store.bucket_client import BucketClient
from profiler_service.store.events import RemoteSnapshot
from profiler_service.store.index import SnapshotQuery

BUCKET = "fleet-database"
W, C = Severity.WARNING, Severity.CRITICAL


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path) -> Iterator[FleetDatabase]:
    if request.param == "sqlite":
        url = database_url(None, tmp_path)
    else:
        url = database_url(request.getfixturevalue("postgres").database(), tmp_path)
    database = FleetDatabase(url)
    database.migrate()
    yield database
    database.close()


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    server = S3Server(free_port()).start(tmp_path_factory.mktemp("moto") / "moto.log")
    server.create_bucket(BUCKET)
    yield server
    server.stop()


def sample_fleet(n: int = 48) -> list[Snapshot]:
    """Namespaces, targets, pods, statuses and findings varied independently; some share a
    second (the keyset's tie on created_at)."""
    out = []
    for i in range(n):
        rules = [(("input_bound", W),), (("host_bound", C), ("input_bound", C)), ()][i % 3]
        out.append(
            fleet_snapshot(
                i,
                namespace=f"team-{'abc'[i % 3]}",
                target=("trainer", "ranker")[i % 2],
                minutes_ago=(i // 2) * 7,  # pairs share a time
                rules=rules,
                status=SnapshotStatus.FAILED if i % 11 == 5 else SnapshotStatus.READY,
                workload=("a", "b", None)[i % 3],
                pod=f"pod-{i % 4}",
            )
        )
    return out


def newest_first(snapshots: list[Snapshot]) -> list[Snapshot]:
    return sorted(snapshots, key=lambda s: (s.created_at, s.id), reverse=True)


def test_the_migrations_build_the_schema_the_code_declares(db):
    assert db.revision() == "0002"
    db.migrate()  # again: nothing to do
    with db.connect() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), metadata)
    assert differences == []


def test_listings_filter_and_page_as_a_plain_filter_of_the_snapshots(db):
    fleet = sample_fleet()
    IndexWrites(db).upsert(RemoteSnapshot(s, 1) for s in fleet)
    queries = IndexQueries(db)

    def listed(**filters) -> tuple[list[str], int]:
        items, total = queries.list_items(SnapshotQuery(limit=500, **filters))
        return [Snapshot.model_validate_json(i).id for i in items], total

    cases = {
        (): lambda s: True,
        (("namespace", "team-b"),): lambda s: s.namespace == "team-b",
        (("target", "ranker"), ("status", "ready")): lambda s: (
            s.target == "ranker" and s.status is SnapshotStatus.READY
        ),
        (("rule", "host_bound"),): lambda s: any(f.rule == "host_bound" for f in s.findings),
        (("severity", "warning"),): lambda s: any(f.severity is W for f in s.findings),
        (("rule", "input_bound"), ("severity", "critical")): lambda s: any(
            f.severity is C for f in s.findings
        ),
        (("workload", "a"), ("pod", "pod-0")): lambda s: s.workload == "a" and s.pod == "pod-0",
        (("namespaces", frozenset({"team-a", "team-c"})),): lambda s: s.namespace != "team-b",
        (("since", fleet[20].created_at), ("until", fleet[4].created_at)): lambda s: (
            fleet[20].created_at <= s.created_at < fleet[4].created_at
        ),
    }
    for filters, keep in cases.items():
        expected = [s.id for s in newest_first(fleet) if keep(s)]
        assert expected, filters  # every case selects something
        assert listed(**dict(filters)) == (expected, len(expected)), filters

    # Keyset pages of 5 walk the whole listing once, in order, as offsets do.
    order = [s.id for s in newest_first(fleet)]
    walked, before = [], None
    while True:
        items, total = queries.list_items(SnapshotQuery(limit=5, before=before))
        page = [Snapshot.model_validate_json(i) for i in items]
        assert total == len(fleet)
        walked += [s.id for s in page]
        if len(page) < 5:
            break
        before = parse_cursor(page_cursor(page[-1]))
    assert walked == order
    pages = [queries.list_items(SnapshotQuery(limit=5, offset=k * 5))[0] for k in range(3)]
    assert [Snapshot.model_validate_json(i).id for p in pages for i in p] == order[:15]


def test_the_fleet_views_queries_agree_with_a_pass_over_the_snapshots(db):
    """Per job (namespace, workload, target): the latest, the oldest, the newest pinned, the
    step-time points, the snapshots with each rule and with each finding and the newest."""
    fleet = sample_fleet()
    for i in (0, 9, 14):
        fleet[i].pinned = True
    IndexWrites(db).upsert(RemoteSnapshot(s, 1) for s in fleet)
    queries = FleetQueries(db)
    since = min(s.created_at for s in fleet) - timedelta(seconds=1)
    ready = [s for s in newest_first(fleet) if s.status is SnapshotStatus.READY]
    jobs: dict[tuple, list[Snapshot]] = {}
    for s in ready:
        jobs.setdefault((s.namespace, s.workload, s.target), []).append(s)  # newest first
    found = queries.jobs(since)
    assert set(found) == set(jobs)
    points = queries.points(since)
    rules = queries.rule_counts(since)
    for key, its in jobs.items():
        rows = found[key]
        assert (rows.latest.id, rows.oldest.id, rows.snapshots) == (its[0].id, its[-1].id, len(its))
        assert [r.id for r in rows.pinned] == [s.id for s in its if s.pinned][:2]
        assert [p[0] for p in points[key]] == [s.created_at for s in reversed(its)]
        by_rule: dict[str, int] = {}
        for s in its:
            for rule in {f.rule for f in s.findings}:
                by_rule[rule] = by_rule.get(rule, 0) + 1
        assert rules.get(key, {}) == by_rule
    counts = queries.finding_counts(since)
    expected: dict[tuple, list[Snapshot]] = {}
    for s in ready:
        for f in s.findings:
            key = (s.namespace or "", s.workload or "", s.target, f.rule, f.severity.value)
            expected.setdefault(key, []).append(s)
    assert {k: (c.snapshots, c.newest_id) for k, c in counts.items()} == {
        k: (len(v), v[0].id) for k, v in expected.items()
    }
    # The ledger's: the newest of each pod (no capture here had a GPU's waste).
    newest_of_pod = {}
    for s in ready:
        newest_of_pod.setdefault((s.namespace, s.pod), s)
    ledger = queries.ledger_rows(since)
    assert sorted(r.id for r in ledger) == sorted(s.id for s in newest_of_pod.values())


def test_a_snapshot_indexed_again_replaces_its_row_and_findings(db):
    writes, queries = IndexWrites(db), IndexQueries(db)
    first = fleet_snapshot(1, namespace="ns", target="t", minutes_ago=1, rules=(("host_bound", C),))
    writes.upsert([RemoteSnapshot(first, 1)])
    again = first.model_copy(update={"pinned": True, "findings": []})
    writes.upsert([RemoteSnapshot(again, 2)])
    assert writes.versions([first.id]) == {first.id: 2}
    assert queries.list_items(SnapshotQuery(rule="host_bound"))[1] == 0
    assert FleetQueries(db).fleet_row(first.id).pinned is True
    assert writes.remove([first.id, "20260101-000000-gone-0"]) == 1
    assert queries.list_items(SnapshotQuery())[1] == 0


def test_one_replica_holds_the_sync_lease_and_a_killed_one_lets_go(postgres, tmp_path):
    url = database_url(postgres.database(), tmp_path)
    one, two = FleetDatabase(url), FleetDatabase(url)
    one.migrate()
    with one.lease("sync") as held:
        assert held
        with two.lease("sync") as also:
            assert not also
    with two.lease("sync") as held:
        assert held
    # A replica killed while it holds the lease: its connection goes, and the lease with it.
    marker = tmp_path / "holding"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import pathlib, time
            from profiler_service.hub.index.database import FleetDatabase
            with FleetDatabase({url!r}).lease("sync") as held:
                pathlib.Path({str(marker)!r}).write_text(str(held))
                time.sleep(600)
        """)]
    )  # fmt: skip
    try:
        wait_until(marker.exists, 30, "the other replica to take the lease")
        assert marker.read_text() == "True"
        with two.lease("sync") as held:
            assert not held
        holder.kill()
        holder.wait(10)

        def free() -> bool:
            with two.lease("sync") as held:
                return held

        wait_until(free, 10, "the killed replica's lease to go")
    finally:
        holder.kill()
        one.close()
        two.close()


def test_syncs_list_only_what_is_new_and_a_whole_listing_finds_deletions(s3, postgres, tmp_path):
    bucket = BucketClient(f"s3://{BUCKET}/sync", s3.options)
    old = sample_fleet(12)
    for s in old:
        put(bucket, s, tmp_path / s.id)
    url = database_url(postgres.database(), tmp_path)
    replicas = [FleetDatabase(url), FleetDatabase(url)]
    replicas[0].migrate()
    clock = [1_000_000.0]
    syncs = [
        IndexSync(db, bucket, interval_s=30, full_interval_s=3600, clock=lambda: clock[0])
        for db in replicas
    ]
    clock[0] = old[0].created_at.timestamp() + 60
    first = syncs[0].refresh()
    assert first.full and first.listed == 12 and first.indexed == 12
    # The other replica within the interval: the fleet was synced, it does not sync again.
    assert syncs[1].refresh().skipped == "another replica synced within the interval"

    fresh = [
        fleet_snapshot(100 + k, namespace="team-z", target="fresh", minutes_ago=-k - 1)
        for k in range(3)
    ]
    for s in fresh:
        put(bucket, s, tmp_path / s.id)
    bucket.delete(old[3].id)
    clock[0] += 60
    second = syncs[1].refresh()
    # Only what was taken since LATE_S before the last sync is listed (the sample's newest
    # snapshots and the three new ones), not the bucket.
    assert not second.full and second.indexed == 3 and second.removed == 0
    assert second.listed < 12
    assert IndexWrites(replicas[0]).versions([old[3].id]) != {}  # not seen yet
    clock[0] += 3600
    third = syncs[0].refresh()
    assert third.full and third.removed == 1 and third.indexed == 0
    items, total = IndexQueries(replicas[1]).list_items(SnapshotQuery(limit=100))
    assert total == 14 and old[3].id not in "".join(items)
    # The counts a scrape reads, as the sync that changed the index counted them.
    counted = FleetQueries(replicas[0]).count_by_status()
    assert sum(n for *_, n in counted) == 14
    assert {(ns, st) for ns, st, _ in counted} >= {("team-z", "ready"), ("team-a", "ready")}
    for db in replicas:
        db.close()


@pytest.mark.parametrize("kind", ["s3", "file"])
def test_a_listing_from_a_time_on_is_the_whole_listing_cut_there(s3, tmp_path, kind):
    """The hub's incremental syncs list from a cursor (S3: StartAfter, not the whole bucket);
    what they see must be exactly what a whole listing holds past it, at the same versions."""
    url = f"s3://{BUCKET}/cut" if kind == "s3" else f"file://{tmp_path / 'bucket'}"
    client = BucketClient(url, s3.options if kind == "s3" else None)
    snapshots = [
        fleet_snapshot(i, namespace="ns", target="t", minutes_ago=10 * i,
                       status=SnapshotStatus.FAILED if i % 4 == 1 else SnapshotStatus.READY,
                       with_file=i % 3 == 0)
        for i in range(12)
    ]  # fmt: skip
    for s in snapshots:
        put(client, s, tmp_path / "files" / s.id)
    whole = client.list_snapshots()
    assert set(whole) == {s.id for s in snapshots}
    cut = snapshots[5].id[:15]  # YYYYMMDD-HHMMSS: what was taken since snapshot 5
    after = client.list_snapshots(start_after=cut)
    assert after == {i: e for i, e in whole.items() if i > cut}
    assert len(after) == 6


def test_counts_stop_past_the_cap_and_the_page_says_so(db):
    """Counting a million rows costs a second: the index counts to one past COUNT_CAP, and the
    page reports the cap as a lower bound; a smaller match is counted exactly."""
    fleet = [
        fleet_snapshot(i, namespace="big" if i < COUNT_CAP + 3 else "small", target="t",
                       minutes_ago=i / 10)
        for i in range(COUNT_CAP + 8)
    ]  # fmt: skip
    IndexWrites(db).upsert(RemoteSnapshot(s, 1) for s in fleet)
    queries = IndexQueries(db)
    items, total = queries.list_items(SnapshotQuery(limit=10))
    assert total == COUNT_CAP + 1 and len(items) == 10
    page = json.loads(snapshots_page_json(items, total, 10, 0, ReportSettings()))
    assert page["count"] == COUNT_CAP and page["count_capped"] is True and page["next"]
    items, total = queries.list_items(SnapshotQuery(namespace="small", limit=10))
    page = json.loads(snapshots_page_json(items, total, 10, 0, ReportSettings()))
    assert (page["count"], page["count_capped"], page["next"]) == (5, False, None)
