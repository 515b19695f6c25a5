"""The hub through its database's outage, on a real PostgreSQL stopped and started again under
a running hub: listings and the fleet view answer 503 `index_unavailable` saying since when, with
no driver text, host or port; a snapshot by id, its report and its file still answer from the
bucket; nothing answers 500; once the database is back, the snapshot taken meanwhile is listed,
and none twice. A sidecar that registers during the outage is routed its alerts at once, and
the other replicas learn of it once the database is back. A sync whose connections are cut
mid-way (a proxy in front of PostgreSQL ends them) resumes and indexes every snapshot once."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import fleet_samples
import psycopg
from fleet_samples import HUB_TOKEN, NOWHERE, fleet_snapshot, put, sidecar_env
from helpers import free_port, start_hub, start_service
from postgres_server import PostgresServer
from s3_server import S3Server, wait_until
from tcp_proxy import ServiceProxy

from profiler_service.store.bucket_client import BucketClient

BUCKET = "index-outage"
ROUTES = ["/profiles", "/fleet", "/metrics", "/readyz", "/healthz", "/fleet/ledger"]


def test_the_hub_answers_what_it_can_while_its_database_is_down(tmp_path):
    s3 = S3Server(free_port()).start(tmp_path / "moto.log")
    s3.create_bucket(BUCKET)
    database = PostgresServer().start()
    hub = None
    try:
        url = database.database()
        mirror = BucketClient(f"s3://{BUCKET}/fleet", s3.options)
        first = [sample(i, with_file=i == 1) for i in (1, 2)]
        for snapshot in first:
            put(mirror, snapshot, tmp_path / "files" / snapshot.id)
        hub = start_hub(tmp_path / "hub", {
            "PROFILER_STORE_URL": f"s3://{BUCKET}/fleet",
            "PROFILER_STORE_OPTIONS": s3.options_json,
            "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
            "PROFILER_HUB_DATABASE_URL": url,
        })  # fmt: skip
        with hub.client() as client:
            wait_until(lambda: client.get("/profiles").json().get("count") == 2, 60, "a sync")
            database.halt()
            down = client.get("/profiles")
            assert down.status_code == 503, down.text
            body = down.json()
            assert body["error"] == "index_unavailable"
            assert "does not answer since" in body["detail"]
            for leak in ("psycopg", "OperationalError", str(database.port), "127.0.0.1"):
                assert leak not in down.text, leak
            fleet = client.get("/fleet", headers={"Accept": "application/json"})
            assert fleet.status_code == 503 and fleet.json()["error"] == "index_unavailable"
            for route in ROUTES:
                answer = client.get(route)
                assert answer.status_code != 500, (route, answer.text)
                assert "psycopg" not in answer.text, route
            # What the bucket holds still answers.
            kept = first[0]
            by_id = client.get(f"/profiles/{kept.id}")
            assert by_id.status_code == 200 and by_id.json()["id"] == kept.id
            assert client.get(f"/profiles/{kept.id}/report").status_code == 200
            name = by_id.json()["files"][0]["name"]
            assert client.get(f"/profiles/{kept.id}/files/{name}").status_code == 200
            # A snapshot taken during the outage is listed once the database is back, once.
            late = sample(3)
            put(mirror, late, tmp_path / "files" / late.id)
            database.start()
            wait_until(lambda: client.get("/profiles").status_code == 200, 60, "the index back")
            wait_until(lambda: client.get("/profiles").json()["count"] == 3, 60, "the late one")
            listed = [s["id"] for s in client.get("/profiles", params={"limit": 50}).json()["data"]]
            assert sorted(listed) == sorted([*(s.id for s in first), late.id])
    finally:
        if hub is not None:
            hub.stop()
        database.stop()
        s3.stop()


WEBHOOK_TOKEN = "am-token"


def test_alerts_and_registrations_during_the_outage_are_routed_then_shared(tmp_path):
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    database = PostgresServer().start()
    hubs, sidecar = [], None
    try:
        url = database.database()
        env = {
            "PROFILER_STORE_URL": f"file://{bucket}",
            "PROFILER_HUB_DATABASE_URL": url,
            "PROFILER_HUB_TOKEN": HUB_TOKEN,
            "PROFILER_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "PROFILER_HUB_SIDECAR_TTL_S": "20",
            "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
        }
        hubs.append(start_hub(tmp_path / "hub-a", env))
        auth = {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}
        with hubs[0].client(headers=auth) as a:
            database.halt()
            wait_until(lambda: a.get("/readyz").status_code == 503, 30, "the hub to see it")
            # Registered with the database down: the replica's own registry has it at once.
            sidecar = start_service(
                tmp_path / "sidecar",
                [f"trainer={NOWHERE}"],
                sidecar_env(hubs[0].url, "trainer-0", "team-a"),
            )
            wait_until(lambda: a.get("/sidecars").json()["count"] == 1, 30, "the registration")
            alert = {
                "status": "firing",
                "labels": {"alertname": "GpuIdle", "pod": "trainer-0", "namespace": "team-a"},
                "annotations": {"profile_duration": "200ms"},
                "startsAt": "2026-12-07T08:00:00Z",
                "fingerprint": "fp-during-the-outage",
            }
            body = {"version": "4", "status": "firing", "receiver": "hub", "alerts": [alert]}
            routed = a.post("/webhooks/alertmanager", json=body)
            assert routed.status_code == 202, routed.text
            [outcome] = routed.json()["alerts"]
            assert outcome["sidecar"] == "team-a/trainer-0", outcome
            assert outcome["outcome"] == "captured" and outcome["snapshot_id"], outcome
            with sidecar.client() as own:
                kept = own.get("/webhooks/alerts").json()["data"]
            assert [o["fingerprint"] for o in kept] == ["fp-during-the-outage"]
            assert a.get("/webhooks/alerts").json()["counts"]["alertmanager"] == {"captured": 1}
            # Back: the registration is written to the shared table, where a replica that
            # never heard the sidecar itself reads it.
            database.start()
            hubs.append(start_hub(tmp_path / "hub-b", env))
            with hubs[1].client(headers=auth) as b:
                wait_until(lambda: b.get("/sidecars").json()["count"] == 1, 60, "shared")
                [seen] = b.get("/sidecars").json()["data"]
                assert seen["name"] == "trainer-0" and seen["via"] == "peer", seen
    finally:
        if sidecar is not None:
            sidecar.stop()
        for hub in hubs:
            hub.stop()
        database.stop()


CUT_SNAPSHOTS = 900  # two batches of the sync's reads and writes, under the listing's count cap


def test_a_sync_whose_connections_are_cut_resumes_and_indexes_each_snapshot_once(tmp_path):
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    mirror = BucketClient(f"file://{bucket}")
    for i in range(1, CUT_SNAPSHOTS + 1):
        mirror.write_doc(fleet_snapshot(i, namespace="team-a", target="trainer", minutes_ago=i))
    database = PostgresServer().start()
    proxy = ServiceProxy([database.port]).start()
    hub = None
    try:
        url = database.database()
        through = url.replace(f":{database.port}/", f":{proxy.port}/")
        hub = start_hub(tmp_path / "hub", {
            "PROFILER_STORE_URL": f"file://{bucket}",
            "PROFILER_HUB_DATABASE_URL": through,
            "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
        })  # fmt: skip
        with hub.client() as client:
            cuts, deadline = 0, time.monotonic() + 60
            while failures(client) == 0 and time.monotonic() < deadline:
                cuts += proxy.cut()
                time.sleep(0.05)
            assert failures(client) >= 1, f"no sync was cut ({cuts} connections cut)"
            wait_until(
                lambda: client.get("/profiles").json().get("count") == CUT_SNAPSHOTS,
                120,
                "the sync to resume",
            )
        with psycopg.connect(url) as conn:
            counted = conn.execute("SELECT count(*), count(DISTINCT id) FROM snapshots")
            rows, ids = counted.fetchone()
        assert rows == ids == CUT_SNAPSHOTS
    finally:
        if hub is not None:
            hub.stop()
        proxy.close()
        database.stop()


def failures(client) -> float:
    """`profiler_fleet_sync_failures_total`, read as Prometheus does."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("profiler_fleet_sync_failures_total"):
            return float(line.split()[-1])
    return 0.0


def sample(i: int, with_file: bool = False):
    """Taken `4 - i` minutes before now (not before the samples' import: a snapshot reaching
    the bucket long after it was taken is found by the next whole listing only)."""
    behind = (fleet_samples.NOW - datetime.now(UTC)).total_seconds() / 60
    return fleet_snapshot(
        i, namespace="team-a", target="trainer", minutes_ago=behind + 4 - i, with_file=with_file
    )
