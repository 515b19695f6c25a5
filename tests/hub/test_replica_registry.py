"""Hub replicas share their registries through the bucket (hub/peers.py): a sidecar heard by one
replica is routed by every replica; a deregistration reaches them all; a replica's word never
overrides a fresher heartbeat; a killed replica's file ages out."""

from __future__ import annotations

import json
import time

from fakes import FakeClock

from profiler_service.hub.peers import PEERS_PREFIX, RegistryShare
from profiler_service.hub.registry import SidecarRegistry
from profiler_service.sidecar_record import SidecarRecord
from profiler_service.store.bucket_client import BucketClient

TTL_S = 20.0


def record(name: str, url: str = "http://10.0.0.1:8080") -> SidecarRecord:
    return SidecarRecord(name=name, namespace="ml", pod=name, targets=["trainer"], url=url)


def replicas(tmp_path, clock: FakeClock) -> tuple[list[SidecarRegistry], list[RegistryShare]]:
    bucket = BucketClient(f"file://{tmp_path / 'bucket'}")
    registries = [SidecarRegistry(TTL_S, clock=clock) for _ in range(2)]
    shares = [RegistryShare(bucket, r, f"hub-{i}", clock) for i, r in enumerate(registries)]
    return registries, shares


def test_a_heartbeat_to_one_replica_reaches_the_other_and_so_does_a_deregistration(tmp_path):
    clock = FakeClock(clock_now := float(int(time.time())))
    (a, b), (share_a, share_b) = replicas(tmp_path, clock)
    a.heartbeat(record("trainer-0").model_copy(update={"via": "hub"}))
    assert a.changed.is_set()  # a new sidecar: shared at the next round, not an interval later
    share_a.once()
    share_b.once()
    assert [(r.key, r.via) for r in b.live()] == [("ml/trainer-0", "peer")]
    assert b.live()[0].last_seen.timestamp() == clock_now
    # b publishes only what it heard itself: nothing.
    doc = json.loads((tmp_path / "bucket" / PEERS_PREFIX / "hub-1.json").read_text())
    assert doc["sidecars"] == [] and doc["replica"] == "hub-1"

    clock.advance(5)
    a.remove("trainer-0", "ml")  # it stopped gracefully, telling replica a only
    share_a.once()
    share_b.once()
    assert a.live() == [] and b.live() == []


def test_a_fresher_heartbeat_wins_and_a_silent_replicas_sidecars_age_out(tmp_path):
    clock = FakeClock(float(int(time.time())))
    (a, b), (share_a, share_b) = replicas(tmp_path, clock)
    a.heartbeat(record("trainer-0", "http://10.0.0.1:8080"))
    share_a.once()
    clock.advance(3)
    b.heartbeat(record("trainer-0", "http://10.0.0.9:8080"))  # it moved to replica b, and pod IP
    share_b.once()  # a's older word does not override it
    assert b.live()[0].url == "http://10.0.0.9:8080" and b.live()[0].via == "hub"
    share_a.once()
    assert a.live()[0].url == "http://10.0.0.9:8080" and a.live()[0].via == "peer"
    # Replica b is killed: its file stays, its records age out on a past the TTL.
    clock.advance(TTL_S + 1)
    share_a.once()
    assert a.live() == []


def test_a_replica_that_starts_knows_the_fleet_before_its_first_request(tmp_path):
    clock = FakeClock(float(int(time.time())))
    (a, b), (share_a, share_b) = replicas(tmp_path, clock)
    for i in range(3):
        a.heartbeat(record(f"trainer-{i}"))
    share_a.once()
    share_b.start()  # one round first, then its thread
    try:
        assert [r.name for r in b.live()] == ["trainer-0", "trainer-1", "trainer-2"]
    finally:
        share_b.stop()


def test_an_unreadable_replica_file_is_skipped_and_the_bucket_down_is_survived(tmp_path):
    clock = FakeClock(float(int(time.time())))
    (a, b), (share_a, share_b) = replicas(tmp_path, clock)
    a.heartbeat(record("trainer-0"))
    share_a.once()
    (tmp_path / "bucket" / PEERS_PREFIX / "broken.json").write_text("{not json")
    share_b.once()
    assert [r.name for r in b.live()] == ["trainer-0"]
    (tmp_path / "bucket" / "x.json").write_text("a file where a directory should be")
    share_b.bucket = BucketClient(f"file://{tmp_path / 'bucket' / 'x.json' / 'fleet'}")
    b.changed.set()
    share_b.once()  # logged and counted, the registry kept
    assert share_b.failures_total == 1 and [r.name for r in b.live()] == ["trainer-0"]
