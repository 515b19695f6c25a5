"""The hub through its database's outage, on a real PostgreSQL stopped and started again under
a running hub: listings and the fleet view answer 503 `index_unavailable` saying since when, with
no driver text, host or port; a snapshot by id, its report and its file still answer from the
bucket; nothing answers 500; once the database is back, the snapshot taken meanwhile is listed,
and none twice."""

from __future__ import annotations

from datetime import UTC, datetime

import fleet_samples
from fleet_samples import fleet_snapshot, put
from helpers import free_port, start_hub
from postgres_server import PostgresServer
from s3_server import S3Server, wait_until

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


def sample(i: int, with_file: bool = False):
    """Taken `4 - i` minutes before now (not before the samples' import: a snapshot reaching
    the bucket long after it was taken is found by the next whole listing only)."""
    behind = (fleet_samples.NOW - datetime.now(UTC)).total_seconds() / 60
    return fleet_snapshot(
        i, namespace="team-a", target="trainer", minutes_ago=behind + 4 - i, with_file=with_file
    )
