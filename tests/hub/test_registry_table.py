"""Hub replicas on a shared PostgreSQL index share their registries through its `sidecars`
table (hub/index/registry_table.py), not the bucket: a sidecar heard by one replica is routed
by every one, a deregistration reaches them all, a fresher heartbeat wins whoever heard it, a
killed replica's sidecars age out, and a replica that starts knows the fleet from the table.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fakes import FakeClock

from profiler_service.hub.index.database import FleetDatabase, database_url
from profiler_service.hub.index.registry_table import BUCKET_REPLICA, RegistryTable
from profiler_service.hub.registry import SidecarRegistry
from profiler_service.sidecar_record import SidecarRecord

TTL_S = 20.0


def record(name: str, url: str = "http://10.0.0.1:8080") -> SidecarRecord:
    return SidecarRecord(name=name, namespace="ml", pod=name, targets=["trainer"], url=url)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(float(int(time.time())))


@pytest.fixture
def replicas(postgres, tmp_path, clock) -> Iterator[tuple[list, list]]:
    """Two replicas, each its own connection pool to one database."""
    url = database_url(postgres.database(), tmp_path)
    dbs = [FleetDatabase(url), FleetDatabase(url)]
    dbs[0].migrate()
    registries = [SidecarRegistry(TTL_S, clock=clock) for _ in dbs]
    tables = [
        RegistryTable(db, r, f"hub-{i}", clock)
        for i, (db, r) in enumerate(zip(dbs, registries, strict=True))
    ]
    yield registries, tables
    for db in dbs:
        db.close()


def test_a_heartbeat_to_one_replica_reaches_the_other_and_so_does_a_deregistration(replicas, clock):
    (a, b), (table_a, table_b) = replicas
    a.heartbeat(record("trainer-0"))
    table_a.once()
    table_b.once()
    assert [(r.key, r.via) for r in b.live()] == [("ml/trainer-0", "peer")]
    assert b.live()[0].last_seen.timestamp() == clock()
    clock.advance(5)
    a.remove("trainer-0", "ml")
    table_a.once()
    table_b.once()
    assert a.live() == [] and b.live() == []
    # ... and a heartbeat older than the deregistration does not bring it back.
    table_b.write([(record("trainer-0"), clock() - 1)], BUCKET_REPLICA)
    table_a.once()
    assert a.live() == []


def test_a_fresher_heartbeat_wins_and_a_killed_replicas_sidecars_age_out(replicas, clock):
    (a, b), (table_a, table_b) = replicas
    a.heartbeat(record("trainer-0", "http://10.0.0.1:8080"))
    table_a.once()
    clock.advance(3)
    b.heartbeat(record("trainer-0", "http://10.0.0.9:8080"))  # it moved to replica b
    table_b.once()
    assert b.live()[0].url == "http://10.0.0.9:8080" and b.live()[0].via == "hub"
    table_a.once()
    assert a.live()[0].url == "http://10.0.0.9:8080" and a.live()[0].via == "peer"
    table_a.publish()  # a's older word, written again, does not override b's in the table
    table_b.once()
    assert b.live()[0].url == "http://10.0.0.9:8080"
    clock.advance(TTL_S + 1)  # b is killed: its rows stay, its sidecars age out on a
    table_a.once()
    assert a.live() == []


def test_a_replica_that_starts_knows_the_fleet_and_the_sidecars_own_records(replicas, clock):
    (a, b), (table_a, table_b) = replicas
    for i in range(3):
        a.heartbeat(record(f"trainer-{i}"))
    table_a.once()
    table_a.write([(record("writer-0"), clock())], BUCKET_REPLICA)  # read from the bucket
    table_b.start()
    try:
        live = {r.name: r.via for r in b.live()}
        assert live == {"trainer-0": "peer", "trainer-1": "peer", "trainer-2": "peer",
                        "writer-0": "bucket"}  # fmt: skip
    finally:
        table_b.stop()
