"""The hub's fleet index over a real S3 API (moto on loopback): listing with filters and paging,
reports and files from the bucket, incremental syncs, and a rebuild from nothing after a restart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fleet_samples import XPLANE, fleet_snapshot, put
from helpers import free_port, start_hub
from s3_server import S3Server, wait_until

from profiler_service.analysis.models import Severity
from profiler_service.models import SnapshotStatus
from profiler_service.store.bucket_client import BucketClient

BUCKET = "fleet-index"
W, C, INFO = Severity.WARNING, Severity.CRITICAL, Severity.INFO


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    server = S3Server(free_port()).start(tmp_path_factory.mktemp("moto") / "moto.log")
    server.create_bucket(BUCKET)
    yield server
    server.stop()


def fleet_snapshots():
    """30 snapshots: 3 namespaces x 2 targets x 5 times; ranker regresses against its pin."""
    out, i = [], 0
    for ns in ("team-a", "team-b", "team-c"):
        for target in ("trainer", "ranker"):
            for k in range(5):
                i += 1
                failed = ns == "team-c" and k == 0
                ranker = target == "ranker"
                out.append(
                    fleet_snapshot(
                        i,
                        namespace=ns,
                        target=target,
                        minutes_ago=60 * (5 - k) + i,
                        step_ms=(100 + 15 * k) if ranker else 100,
                        rules=(
                            (("input_bound", W),) if k % 2 else (("host_bound", C), ("x", INFO))
                        ),
                        status=SnapshotStatus.FAILED if failed else SnapshotStatus.READY,
                        pinned=ranker and k == 0,
                        with_file=i == 1,
                    )
                )
    return out


def hub_env(s3: S3Server, prefix: str, database_url: str | None = None) -> dict[str, str]:
    env = {
        "PROFILER_STORE_URL": f"s3://{BUCKET}/{prefix}",
        "PROFILER_STORE_OPTIONS": s3.options_json,
        "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
    }
    if database_url:
        env["PROFILER_HUB_DATABASE_URL"] = database_url
    return env


@pytest.fixture(params=["sqlite", "postgresql"])
def index_url(request) -> str | None:
    """The hub's index: SQLite under its store (the default), or a real PostgreSQL's."""
    return request.getfixturevalue("postgres").database() if request.param != "sqlite" else None


def ids(client, **params) -> list[str]:
    body = client.get("/profiles", params=params).json()
    return [s["id"] for s in body["data"]]


def test_the_fleet_listing_filters_pages_and_serves_from_the_bucket(s3, tmp_path, index_url):
    prefix = f"listing-{'pg' if index_url else 'sqlite'}"
    mirror = BucketClient(f"s3://{BUCKET}/{prefix}", s3.options)
    snapshots = fleet_snapshots()
    for s in snapshots:
        put(mirror, s, tmp_path / "files" / s.id)
    newest_first = sorted((s.id for s in snapshots), key=lambda x: x, reverse=True)
    by_time = sorted(snapshots, key=lambda s: s.created_at, reverse=True)
    hub = start_hub(tmp_path / "hub", hub_env(s3, prefix, index_url))
    try:
        with hub.client() as client:
            wait_until(lambda: client.get("/profiles").json()["count"] == 30, 60, "first sync")
            assert ids(client, limit=500) == [s.id for s in by_time]
            assert len(set(newest_first)) == 30

            def expect(pred, **params):
                want = [s.id for s in by_time if pred(s)]
                assert ids(client, limit=500, **params) == want, params
                assert client.get("/profiles", params=params).json()["count"] == len(want)

            expect(lambda s: s.namespace == "team-b", namespace="team-b")
            expect(lambda s: s.target == "ranker", target="ranker")
            expect(lambda s: s.pod == "ranker-0", pod="ranker-0")
            expect(lambda s: any(f.rule == "host_bound" for f in s.findings), rule="host_bound")
            expect(lambda s: any(f.severity is C for f in s.findings), severity="critical")
            expect(lambda s: s.status is SnapshotStatus.FAILED, status="failed")
            cut = by_time[10].created_at
            expect(lambda s: s.created_at >= cut, since=cut.isoformat())
            expect(
                lambda s: s.namespace == "team-a" and s.target == "trainer"
                and any(f.rule == "input_bound" for f in s.findings),
                namespace="team-a", target="trainer", rule="input_bound",
            )  # fmt: skip
            pages = [ids(client, limit=7, offset=o) for o in range(0, 30, 7)]
            assert [x for page in pages for x in page] == [s.id for s in by_time]
            assert client.get("/profiles", params={"severity": "bogus"}).status_code == 422
            # Keyset paging: each page's `next` is the following page's `before`, to the end.
            walked, params = [], {"limit": 7, "namespace": "team-a"}
            while True:
                body = client.get("/profiles", params=params).json()
                walked += [item["id"] for item in body["data"]]
                assert body["count"] == 10
                if body["next"] is None:
                    break
                params["before"] = body["next"]
            assert walked == [s.id for s in by_time if s.namespace == "team-a"]
            bad = client.get("/profiles", params={"before": "yesterday,../x"})
            assert bad.status_code == 422 and bad.json()["error"] == "invalid_request"

            first = snapshots[0]
            one = client.get(f"/profiles/{first.id}").json()
            assert one["namespace"] == "team-a" and one["findings"][0]["rule"] == "host_bound"
            report = client.get(f"/profiles/{first.id}/report")
            assert report.status_code == 200 and "host_bound on trainer" in report.text
            download = client.get(f"/profiles/{first.id}/files/host.xplane.pb")
            assert download.status_code == 200 and download.content == XPLANE
            missing = client.get(f"/profiles/{first.id}/files/..%2Fsnapshot.json")
            assert missing.status_code == 404 and missing.json()["error"] == "file_not_found"
            gone = client.get("/profiles/20200101-000000-x-000000000000")
            assert gone.status_code == 404 and gone.json()["error"] == "snapshot_not_found"
            # Read-only: the hub has no write routes on snapshots.
            assert client.delete(f"/profiles/{first.id}").status_code == 405
    finally:
        hub.stop()


def test_syncs_are_incremental_and_a_deleted_index_is_rebuilt_the_same(s3, tmp_path):
    mirror = BucketClient(f"s3://{BUCKET}/rebuild", s3.options)
    snapshots = fleet_snapshots()
    for s in snapshots:
        put(mirror, s, tmp_path / "files" / s.id)
    env = {**hub_env(s3, "rebuild"), "PROFILER_HUB_FULL_SYNC_INTERVAL_S": "3"}
    hub = start_hub(tmp_path / "hub", env)
    try:
        with hub.client() as client:
            wait_until(lambda: client.get("/profiles").json()["count"] == 30, 60, "first sync")

            def synced() -> float:
                text = client.get("/metrics").text
                return float(re.search(r"^profiler_fleet_syncs_total (\S+)$", text, re.M)[1])

            # New snapshots and a deletion: the next syncs list only what was taken since the
            # last (the three new ones), and a whole listing every 3 s finds the deletion.
            extra = [
                fleet_snapshot(100 + k, namespace="team-z", target="fresh", minutes_ago=k)
                for k in range(3)
            ]
            for s in extra:
                put(mirror, s, tmp_path / "files" / s.id)
            mirror.delete(snapshots[5].id)
            wait_until(lambda: client.get("/profiles").json()["count"] == 32, 30, "the changes")
            assert snapshots[5].id not in ids(client, limit=500)
            assert ids(client, namespace="team-z") == [s.id for s in extra]
            assert synced() >= 2
            log = hub.log.read_text()
            listed = re.findall(r"fleet sync: (\d+) snapshots listed \(since the cursor\)", log)
            assert listed and max(map(int, listed)) <= 3, log[-3000:]
            wait_until(
                lambda: (
                    "32 snapshots listed (whole bucket), 0 indexed, 0 dropped"
                    in hub.log.read_text()
                ),
                30,
                "a whole listing with nothing new",
            )
            before = client.get("/profiles", params={"limit": 500}).json()
    finally:
        hub.stop()

    for suffix in ("", "-wal", "-shm"):
        (tmp_path / "hub" / f"fleet.sqlite{suffix}").unlink(missing_ok=True)
    again = start_hub(tmp_path / "hub", env)
    try:
        with again.client() as client:
            wait_until(lambda: client.get("/profiles").json()["count"] == 32, 60, "the rebuild")
            after = client.get("/profiles", params={"limit": 500}).json()
    finally:
        again.stop()
    assert after == before


def test_the_fleet_page_and_metrics_show_each_jobs_latest_state(s3, tmp_path, index_url):
    prefix = f"page-{'pg' if index_url else 'sqlite'}"
    mirror = BucketClient(f"s3://{BUCKET}/{prefix}", s3.options)
    snapshots = fleet_snapshots()
    for s in snapshots:
        put(mirror, s, tmp_path / "files" / s.id)
    hub = start_hub(tmp_path / "hub", hub_env(s3, prefix, index_url))
    try:
        with hub.client() as client:
            wait_until(lambda: client.get("/profiles").json()["count"] == 30, 60, "first sync")
            page = client.get("/fleet")
            assert page.status_code == 200
            html = page.text
            for ns in ("team-a", "team-b", "team-c"):
                for target in ("trainer", "ranker"):
                    assert f'data-job="{ns}/{target}"' in html
            # ranker: 100 ms pinned, 160 ms now: +60 %, a regression; trainer is flat.
            ranker = html.split('data-job="team-a/ranker"')[1].split("</tr>")[0]
            assert "+60 % regression" in ranker and "pinned" in ranker
            trainer = html.split('data-job="team-a/trainer"')[1].split("</tr>")[0]
            assert "+0 %" in trainer and "regression" not in trainer
            assert "<svg" in ranker  # the step time over the window
            rules = html.split('id="rules"')[1]
            assert "input_bound" in rules and "host_bound" in rules
            # A page of jobs: the regressed first (every ranker), the counts over them all.
            two = client.get("/fleet", params={"limit": 2}).text
            shown = re.findall(r'<tr data-job="([^"]+)"', two.split('id="jobs"')[1])
            assert shown == ["team-a/ranker", "team-b/ranker"]
            assert "1-2 of 6 jobs" in two and 'href="?offset=2&amp;limit=2">next' in two
            team_b = client.get("/fleet", params={"namespace": "team-b"}).text
            assert set(
                re.findall(r'<tr data-job="(team-[a-z])/', team_b.split('id="jobs"')[1])
            ) == {"team-b"}

            text = client.get("/metrics").text
            latest = [s for s in snapshots if s.namespace == "team-a" and s.target == "ranker"][-1]
            assert (
                f'profiler_fleet_latest_finding{{namespace="team-a",rule="host_bound",'
                f'severity="critical",snapshot_id="{latest.id}",target="ranker",workload=""}} 1.0'
            ) in text
            ranker = 'namespace="team-a",target="ranker",workload=""'
            assert f"profiler_fleet_regression{{{ranker}}} 1.0" in text
            assert f"profiler_fleet_step_time_seconds{{{ranker}}} 0.16" in text
            assert 'profiler_fleet_snapshots{namespace="team-c",status="failed"} 2.0' in text
            open_metrics = client.get(
                "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
            ).text
            exemplar = re.search(
                r'^profiler_fleet_findings_total\{namespace="team-a",rule="host_bound",'
                r'severity="critical",target="ranker",workload=""\} 3.0 '
                r'# \{snapshot_id="([^"]+)"\}',
                open_metrics,
                re.M,
            )
            assert exemplar and exemplar[1] == latest.id
    finally:
        hub.stop()


def test_a_replica_on_the_shared_index_starts_without_reading_the_bucket(s3, tmp_path, postgres):
    """On PostgreSQL the fleet was indexed once: a replica that starts lists it from its first
    request, even with the bucket unreachable; the whole snapshot then needs the bucket."""
    mirror = BucketClient(f"s3://{BUCKET}/shared", s3.options)
    snapshots = fleet_snapshots()
    for s in snapshots:
        put(mirror, s, tmp_path / "files" / s.id)
    url = postgres.database()
    first = start_hub(tmp_path / "hub-a", hub_env(s3, "shared", url))
    try:
        with first.client() as client:
            wait_until(lambda: client.get("/profiles").json()["count"] == 30, 60, "first sync")
            listed = client.get("/profiles", params={"limit": 500}).json()
    finally:
        first.stop()
    nowhere = {**s3.fast_fail_options, "endpoint_url": f"http://127.0.0.1:{free_port()}"}
    env = {**hub_env(s3, "shared", url), "PROFILER_STORE_OPTIONS": json.dumps(nowhere)}
    second = start_hub(tmp_path / "hub-b", env)
    try:
        with second.client() as client:
            assert client.get("/profiles", params={"limit": 500}).json() == listed
            assert client.get("/fleet").status_code == 200
            one = client.get(f"/profiles/{snapshots[0].id}")
            assert one.status_code == 503 and one.json()["error"] == "bucket_unreachable", one.text
    finally:
        second.stop()
