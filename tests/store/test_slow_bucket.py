"""A bucket that answers, but seconds late on every call (issue 25), and one that goes away.

The store's S3 client talks to moto's S3 server through `SlowS3Proxy` (slow_s3.py), which holds
every request `DELAY_S` before forwarding it: a real slow bucket, nothing of ours stubbed. The
store must not wait for it: publishing, listing, reading and pinning answer while a bucket call
of the mirror is still in flight (the proxy's log says it had not answered yet: an order of
events, not a time a busy machine could stretch), and each snapshot reaches the bucket exactly
once when the uploads catch up. Then the same through a whole sidecar (its HTTP API, captures
of a recorded capture analysed for real): through a slow bucket, and through an outage.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from fakes import WritesBytes
from fastapi.testclient import TestClient
from helpers import RECORDED_CAPTURE, free_port
from s3_server import S3Server, wait_until
from slow_s3 import SlowS3Proxy
from test_bucket_client import close_mirrored, open_mirrored, sync_of, uploaded
from test_snapshot_store import T0, listed_ids, publish_one

from profiler_service.api.app import create_app
from profiler_service.config import Settings
from profiler_service.service import build_service
from profiler_service.store.index import SnapshotQuery
from profiler_service.store.mirror_sync import MirrorSync
from profiler_service.targets import TargetKind

# The faults injected, not waits: the tests wait for states (the proxy's log, the mirror's
# counters), and the times measured are printed, never asserted.
DELAY_S = 2.0  # every bucket call, each way through the proxy
OUTAGE_S = 60.0  # how long the sidecar's bucket stays away
MAX_OUTAGE_CAPTURES = 20  # captures made meanwhile, at most (about one each OUTAGE_S / 12)

ID_X = "20260101-000000-trainer-cccccccccccc"  # another sidecar's, only in the bucket
ID_A = "20260101-000001-trainer-aaaaaaaaaaaa"
ID_B = "20260101-000002-trainer-bbbbbbbbbbbb"
ID_C = "20260101-000003-trainer-dddddddddddd"


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    server = S3Server(free_port()).start(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def test_a_slow_bucket_delays_no_publish_and_no_read_and_each_snapshot_lands_once(s3, tmp_path):
    s3.create_bucket("slow")
    url = "s3://slow/fleet"
    other = open_mirrored(tmp_path / "other", url, s3.options)  # straight to moto: fast
    publish_one(other, ID_X, created_at=T0 - timedelta(minutes=1))
    wait_until(lambda: uploaded(other), 30, "the other sidecar's upload")
    close_mirrored(other)

    proxy = SlowS3Proxy(s3.port, DELAY_S).start()
    store = open_mirrored(tmp_path / "a", url, proxy.options, refresh_interval_s=0)
    try:
        # Its first listing takes several slow calls; meanwhile the store answers, empty.
        assert listed_ids(store) == []
        wait_until(lambda: listed_ids(store) == [ID_X], 60, "the first (slow) listing")

        snapshot_a, publish_a_s = timed(lambda: publish_one(store, ID_A, payload=b"A" * 4096))
        # The mirror starts copying A: wait until its first bucket call for A is in flight.
        first_a = wait_until(
            lambda: next((r for r in proxy.snapshot_log() if ID_A in r.path), None),
            30,
            "the mirror's first call for A",
        )
        # While that call waits at the bucket, everything the API does answers at once.
        took = {"publish A": publish_a_s}
        _, took["publish B"] = timed(
            lambda: publish_one(
                store, ID_B, payload=b"B" * 2048, created_at=T0 + timedelta(minutes=1)
            )
        )
        listed, took["list"] = timed(lambda: listed_ids(store))
        docs, took["list docs"] = timed(lambda: store.list_docs(SnapshotQuery(limit=10)))
        got, took["get"] = timed(lambda: store.get(ID_A))
        pinned, took["pin a remote-only snapshot"] = timed(lambda: store.set_pinned(ID_X, True))
        path, took["file"] = timed(lambda: store.file_path(ID_B, "host1.xplane.pb"))
        answered = time.monotonic()

        call = next(r for r in proxy.snapshot_log() if r.started == first_a.started)
        assert call.finished is None or call.finished > answered, "the bucket answered first"
        assert listed == [ID_B, ID_A, ID_X]
        assert docs[1] == 3 and json.loads(docs[0][0])["id"] == ID_B
        assert (
            got.status == snapshot_a.status and pinned.pinned and path.read_bytes() == b"B" * 2048
        )
        assert store.get(ID_X).pinned  # here at once; in the bucket once the queue gets there
        sync = sync_of(store)
        assert sync.is_pending(ID_A) and sync.is_pending(ID_B) and sync.is_pending(ID_X)

        proxy.delay_s = 0  # the bucket quick again: the queue catches up (and the test ends)
        _, catch_up_s = timed(lambda: wait_until(lambda: uploaded(store), 180, "the uploads"))
        calls = len(proxy.snapshot_log())
        print(f"answered in {took} s; {calls} bucket calls; uploads done {catch_up_s:.1f} s later")
    finally:
        close_mirrored(store)
        proxy.stop()

    # Each snapshot reached the bucket exactly once: one PUT per object, none repeated.
    fs = s3.fs()
    for snapshot_id, payload in ((ID_A, b"A" * 4096), (ID_B, b"B" * 2048)):
        prefix = f"slow/fleet/plugins/profile/{snapshot_id}"
        assert proxy.puts(f"{prefix}/host1.xplane.pb") == 1
        assert proxy.puts(f"{prefix}/snapshot.json") == 1
        assert fs.cat_file(f"{prefix}/host1.xplane.pb") == payload
    x_doc = f"slow/fleet/plugins/profile/{ID_X}/snapshot.json"
    assert proxy.puts(x_doc) == 1 and proxy.puts(f"{ID_X}/host1.xplane.pb") == 0
    assert json.loads(fs.cat_file(x_doc))["pinned"] is True
    assert sorted(
        p.rsplit("/", 2)[1] for p in fs.glob("slow/fleet/plugins/profile/*/snapshot.json")
    ) == [
        ID_X,
        ID_A,
        ID_B,
    ]


def test_a_bucket_outage_loses_and_duplicates_nothing(s3, tmp_path):
    """Snapshots made while the bucket is away each reach it exactly once when it is back."""
    s3.create_bucket("outage")
    url = "s3://outage/fleet"
    dead = free_port()  # nothing listens there: the proxy answers 502, as a dead gateway would
    proxy = SlowS3Proxy(dead, 0).start()
    store = open_mirrored(tmp_path / "a", url, proxy.options, retry_max_s=1)
    try:
        ids = [ID_A, ID_B, ID_C]
        for i, snapshot_id in enumerate(ids):
            publish_one(store, snapshot_id, created_at=T0 + timedelta(seconds=i))
        wait_until(lambda: sync_of(store).upload_failures_total >= 2, 60, "failed attempts")
        assert listed_ids(store) == ids[::-1]  # the store kept serving, from its index
        assert sync_of(store).pending_count() == 3

        proxy.upstream_port = s3.port  # the bucket is back
        wait_until(lambda: uploaded(store), 60, "the retried uploads")
    finally:
        close_mirrored(store)
        proxy.stop()
    for snapshot_id in ids:
        prefix = f"outage/fleet/plugins/profile/{snapshot_id}"
        assert proxy.puts(f"{prefix}/host1.xplane.pb") == 1
        assert proxy.puts(f"{prefix}/snapshot.json") == 1
    reader = open_mirrored(tmp_path / "reader", url, s3.options, refresh_interval_s=0)
    try:
        wait_until(lambda: listed_ids(reader) == ids[::-1], 30, "the other store's listing")
    finally:
        close_mirrored(reader)


@dataclass
class SidecarUnderTest:
    client: TestClient
    mirror: MirrorSync

    def capture(self) -> dict:
        body = self.client.post("/profile", params={"duration": "100ms", "wait": "true"}).json()
        assert body["status"] == "ready", body.get("error")
        return body


@contextlib.contextmanager
def mirrored_sidecar(tmp_path: Path, url: str, options: dict) -> Iterator[SidecarUnderTest]:
    """A whole sidecar (build_service, its HTTP app) whose bucket is `url` through `options`;
    each capture writes a small recorded capture that XProf analyses for real."""
    settings = Settings(
        store=tmp_path / "sidecar",
        targets="grpc://127.0.0.1:9",
        store_url=url,
        store_options=json.dumps(options),
        store_retry_max_s=1,
    )
    service = build_service(settings, {TargetKind.GRPC: WritesBytes(RECORDED_CAPTURE.read_bytes())})
    assert service.mirror is not None
    with TestClient(create_app(service)) as client:
        yield SidecarUnderTest(client, service.mirror)


def assert_each_object_put_once(proxy: SlowS3Proxy, prefix: str, snapshots: list[dict]) -> None:
    """Every file of every snapshot, and its snapshot.json, reached the bucket by one PUT."""
    for snapshot in snapshots:
        run = f"{prefix}/plugins/profile/{snapshot['id']}"
        for name in [f["name"] for f in snapshot["files"]] + ["snapshot.json"]:
            key = f"{run}/{name}"
            assert proxy.puts(key) == 1, (key, proxy.puts(key, ok_only=False))


def test_a_sidecar_captures_and_answers_while_a_slow_bucket_copies(s3, tmp_path):
    s3.create_bucket("slow-sidecar")
    proxy = SlowS3Proxy(s3.port, DELAY_S).start()
    try:
        with mirrored_sidecar(tmp_path, "s3://slow-sidecar/fleet", proxy.options) as sidecar:
            first = sidecar.capture()
            captured = time.monotonic()
            # The capture was analysed and published before the bucket had answered any call
            # for it: the copy follows, it does not lead.
            calls = [r for r in proxy.snapshot_log() if first["id"] in r.path]
            assert all(r.finished is None or r.finished > captured for r in calls), calls
            in_flight = wait_until(
                lambda: next(
                    (r for r in proxy.snapshot_log() if r.finished is None and r.started), None
                ),
                30,
                "a bucket call in flight",
            )
            client = sidecar.client
            second = sidecar.capture()
            answers = [
                client.get("/profiles").status_code,
                client.get(f"/profiles/{first['id']}").status_code,
                client.get(f"/profiles/{first['id']}/report").status_code,
                client.get("/metrics").status_code,
                client.get("/healthz").status_code,
            ]
            answered = time.monotonic()
            call = next(r for r in proxy.snapshot_log() if r.started == in_flight.started)
            assert call.finished is None or call.finished > answered, "the bucket answered first"
            assert answers == [200] * 5
            assert client.get("/profiles").json()["count"] == 2
            proxy.delay_s = 0  # the bucket quick again: the copies catch up (the test, too)
            wait_until(lambda: sidecar.mirror.pending_count() == 0, 120, "the uploads")
    finally:
        proxy.stop()
    assert_each_object_put_once(proxy, "slow-sidecar/fleet", [first, second])


def test_a_sidecar_keeps_capturing_through_a_bucket_outage_and_each_snapshot_lands_once(
    s3, tmp_path
):
    """The bucket away for a minute (the issue's outage): the sidecar captures and answers all
    along, its copies fail and are retried, and when the bucket is back each lands once."""
    s3.create_bucket("outage-sidecar")
    proxy = SlowS3Proxy(free_port(), 0).start()  # the bucket away: 502 on every call
    try:
        with mirrored_sidecar(tmp_path, "s3://outage-sidecar/fleet", proxy.options) as sidecar:
            made = [sidecar.capture()]
            wait_until(lambda: sidecar.mirror.upload_failures_total >= 2, 60, "failed copies")
            back_at = time.monotonic() + OUTAGE_S
            while time.monotonic() < back_at and len(made) < MAX_OUTAGE_CAPTURES:
                made.append(sidecar.capture())  # and more while it is away, every few seconds
                listed = sidecar.client.get("/profiles", params={"limit": 100}).json()
                assert [s["id"] for s in listed["data"]] == [s["id"] for s in reversed(made)]
                time.sleep(OUTAGE_S / 12)  # the captures spread over the outage: not a wait
            assert sidecar.mirror.pending_count() == len(made)
            failures = sidecar.mirror.upload_failures_total
            assert failures > len(made)  # each copy was tried, failed and tried again
            assert proxy.puts("outage-sidecar/fleet/plugins/profile/") == 0

            proxy.upstream_port = s3.port  # the bucket is back
            wait_until(lambda: sidecar.mirror.pending_count() == 0, 120, "the retried copies")
            assert sidecar.client.get("/profiles").json()["count"] == len(made)
    finally:
        proxy.stop()
    print(f"{len(made)} snapshots through the outage, {failures} failed copies retried")
    assert_each_object_put_once(proxy, "outage-sidecar/fleet", made)
    reader = open_mirrored(tmp_path / "reader", "s3://outage-sidecar/fleet", s3.options,
                           refresh_interval_s=0)  # fmt: skip
    try:
        expected = [s["id"] for s in reversed(made)]  # newest first (ids share a second)
        wait_until(lambda: listed_ids(reader) == expected, 30, "another store's listing")
    finally:
        close_mirrored(reader)
