"""The object-store mirror against a real S3 API (moto's standalone server on loopback).

Two SnapshotStores with separate local directories and one bucket URL stand in for two sidecars;
the stores are the real ones, the snapshots carry stand-in capture bytes (the e2e test in
tests/e2e/test_shared_bucket.py uses real captures of a real job).
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import free_port
from s3_server import S3Server, wait_until
from test_snapshot_store import fail_one, listed_ids, publish_one

from profiler_service.config import Settings, StorageSettings
from profiler_service.errors import FileNotFound, SnapshotNotFound
from profiler_service.models import SnapshotStatus, new_snapshot_id
from profiler_service.store.bucket_client import BucketClient
from profiler_service.store.mirror_sync import MirrorSync, mirrored_store
from profiler_service.store.snapshot_store import SnapshotStore

ID_A = "20260101-000000-trainer-aaaaaaaaaaaa"
ID_B = "20260101-000001-trainer-bbbbbbbbbbbb"
ID_C = "20260101-000002-trainer-cccccccccccc"


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    server = S3Server(free_port()).start(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def bucket(s3: S3Server, request) -> str:
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-")
    s3.create_bucket(name)
    return name


SYNCS: weakref.WeakKeyDictionary[SnapshotStore, MirrorSync] = weakref.WeakKeyDictionary()


def sync_of(store: SnapshotStore) -> MirrorSync:
    """The mirror a test store was built with (the store itself does not know it)."""
    return SYNCS[store]


def open_mirrored(root: Path, url: str, options: dict, **kwargs) -> SnapshotStore:
    store, sync = mirrored_store(root, BucketClient(url, options), **kwargs)
    store.open()
    sync.start()
    SYNCS[store] = sync
    return store


def close_mirrored(store: SnapshotStore) -> None:
    sync_of(store).stop()
    store.close()


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator:
    opened: list[SnapshotStore] = []

    def make(name: str, url: str, options: dict, **kwargs) -> SnapshotStore:
        kwargs.setdefault("refresh_interval_s", 0)
        kwargs.setdefault("retry_max_s", 0.5)
        store = open_mirrored(tmp_path / name, url, options, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        close_mirrored(store)


def uploaded(store: SnapshotStore) -> bool:
    return sync_of(store).pending_count() == 0


def listed_soon(store: SnapshotStore, expected: list[str], **query) -> None:
    """Listing answers from the index at once and refreshes from the bucket in the background:
    what other stores wrote shows up within a refresh or two."""
    wait_until(lambda: listed_ids(store, **query) == expected, 30, f"listing {expected}")


def refreshed(store: SnapshotStore) -> None:
    """Wait for the store's first listing of the bucket (started by `MirrorSync.start`)."""
    wait_until(lambda: sync_of(store).last_refresh is not None, 30, "the first listing")


def test_a_published_snapshot_lands_in_the_bucket_in_the_xprof_layout(s3, bucket, open_store):
    a = open_store("a", f"s3://{bucket}/fleet", s3.options)
    publish_one(a, ID_A, payload=b"A" * 1000)
    wait_until(lambda: uploaded(a), 30, "the upload")
    fs = s3.fs()
    prefix = f"{bucket}/fleet/plugins/profile/{ID_A}"
    assert sorted(p.rsplit("/", 1)[1] for p in fs.find(prefix)) == [
        "host1.xplane.pb",
        "snapshot.json",
    ]
    assert fs.cat_file(f"{prefix}/host1.xplane.pb") == b"A" * 1000
    doc = json.loads(fs.cat_file(f"{prefix}/snapshot.json"))
    assert doc["id"] == ID_A and doc["status"] == "ready"
    assert sync_of(a).uploads_total == 1


def test_a_second_store_lists_reads_and_downloads_what_the_first_wrote(s3, bucket, open_store):
    url = f"s3://{bucket}/fleet"
    a = open_store("a", url, s3.options)
    b = open_store("b", url, s3.options)
    publish_one(a, ID_A, payload=b"A" * 5000)
    publish_one(b, ID_B, payload=b"B" * 10)
    wait_until(lambda: uploaded(a) and uploaded(b), 30, "both uploads")

    central = open_store("central", url, s3.options)  # no captures of its own
    listed_soon(central, [ID_B, ID_A])
    listed_soon(a, [ID_B, ID_A])
    assert central.get(ID_A).status is SnapshotStatus.READY
    size, chunks = central.remote_file(ID_A, "host1.xplane.pb")
    assert size == 5000 and b"".join(chunks) == b"A" * 5000
    with pytest.raises(FileNotFound):
        central.file_path(ID_A, "host1.xplane.pb")  # nothing on its disk: it streams
    # Metrics of each instance count its own snapshots, not the fleet's.
    assert central.totals.totals_by_status() == []
    assert central.totals.latest_ready() == {}
    assert [row[:2] for row in a.totals.totals_by_status()] == [("ready", 1)]


def test_a_snapshot_id_not_yet_listed_is_read_straight_from_the_bucket(s3, bucket, open_store):
    url = f"s3://{bucket}/fleet"
    a = open_store("a", url, s3.options)
    b = open_store("b", url, s3.options, refresh_interval_s=3600)
    refreshed(b)  # its one refresh for the hour
    assert listed_ids(b) == []
    publish_one(a, ID_A)
    wait_until(lambda: uploaded(a), 30, "the upload")
    assert listed_ids(b) == []
    assert b.get(ID_A).id == ID_A


def test_a_prefix_without_snapshot_json_is_absent(s3, bucket, open_store):
    url = f"s3://{bucket}/fleet"
    fs = s3.fs()
    prefix = f"{bucket}/fleet/plugins/profile/{ID_C}"
    # An upload cut off after the capture file: no snapshot.json yet.
    fs.pipe_file(f"{prefix}/host1.xplane.pb", b"partial upload")
    # And a snapshot.json that is not one.
    fs.pipe_file(f"{bucket}/fleet/plugins/profile/{ID_B}/snapshot.json", b"{not json")
    reader = open_store("reader", url, s3.options)
    refreshed(reader)
    assert sync_of(reader).last_refresh.indexed == 0  # listed the bad one, indexed nothing
    assert listed_ids(reader) == []
    with pytest.raises(SnapshotNotFound):
        reader.get(ID_C)
    with pytest.raises(SnapshotNotFound):
        reader.get(ID_B)

    writer = open_store("writer", url, s3.options)
    publish_one(writer, ID_A)
    wait_until(lambda: uploaded(writer), 30, "the upload")
    listed_soon(reader, [ID_A])


def test_the_bucket_down_never_loses_a_snapshot_and_the_upload_follows(tmp_path, open_store):
    down = S3Server(free_port())  # nothing listens there yet
    url = "s3://late-bucket/fleet"
    a = open_store("a", url, down.fast_fail_options, retry_max_s=1)
    snapshot = publish_one(a, ID_A, payload=b"kept" * 100)
    assert snapshot.status is SnapshotStatus.READY
    assert (a.profile_dir / ID_A / "host1.xplane.pb").read_bytes() == b"kept" * 100
    assert sync_of(a).pending_count() == 1
    wait_until(lambda: sync_of(a).upload_failures_total >= 1, 60, "a failed attempt")
    assert listed_ids(a) == [ID_A]  # listing still answers, from the local index
    assert a.get(ID_A).status is SnapshotStatus.READY

    down.start(tmp_path / "moto-late.log")
    try:
        down.create_bucket("late-bucket")
        wait_until(lambda: uploaded(a), 60, "the retried upload")
        assert down.fs().cat_file(f"late-bucket/fleet/plugins/profile/{ID_A}/host1.xplane.pb") == (
            b"kept" * 100
        )
        listed_soon(open_store("b", url, down.options), [ID_A])
    finally:
        down.stop()


def test_pending_uploads_survive_a_restart(s3, bucket, tmp_path):
    root = tmp_path / "a"
    dead = S3Server(free_port())
    url = f"s3://{bucket}/fleet"
    store = open_mirrored(root, url, dead.fast_fail_options, retry_max_s=60, max_count=1)
    publish_one(store, ID_A)
    close_mirrored(store)
    assert (root / ".mirror" / f"{ID_A}.upload").exists()

    # Still down after the restart: the queue holds ID_A from retention, as before it.
    store = open_mirrored(root, url, dead.fast_fail_options, retry_max_s=60, max_count=1)
    publish_one(store, ID_B)
    assert (store.profile_dir / ID_A).is_dir() and (store.profile_dir / ID_B).is_dir()
    close_mirrored(store)

    store = open_mirrored(root, url, s3.options, max_count=1)
    try:
        wait_until(lambda: uploaded(store), 30, "the uploads at start")
        for snapshot_id in (ID_A, ID_B):
            assert s3.fs().exists(f"{bucket}/fleet/plugins/profile/{snapshot_id}/snapshot.json")
    finally:
        close_mirrored(store)


def test_failed_records_go_under_failed(s3, bucket, open_store):
    url = f"s3://{bucket}/fleet"
    a = open_store("a", url, s3.options)
    fail_one(a, ID_A, keep_files=True)
    fail_one(a, ID_B, keep_files=False)
    wait_until(lambda: uploaded(a), 30, "the uploads")
    fs = s3.fs()
    assert fs.exists(f"{bucket}/fleet/failed/{ID_A}/snapshot.json")
    assert fs.exists(f"{bucket}/fleet/failed/{ID_A}/run/host1.xplane.pb")
    assert fs.exists(f"{bucket}/fleet/failed/{ID_B}/snapshot.json")
    assert not fs.exists(f"{bucket}/fleet/plugins/profile/{ID_A}")

    central = open_store("central", url, s3.options)
    listed_soon(central, [ID_B, ID_A], status="failed")
    assert b"".join(central.remote_file(ID_A, "host1.xplane.pb")[1]) == b"xplane-bytes"


def test_delete_removes_the_snapshot_from_the_bucket_for_everyone(s3, bucket, open_store):
    url = f"s3://{bucket}/fleet"
    a = open_store("a", url, s3.options)
    publish_one(a, ID_A)
    publish_one(a, ID_B)
    wait_until(lambda: uploaded(a), 30, "the uploads")
    central = open_store("central", url, s3.options)
    listed_soon(central, [ID_B, ID_A])

    central.delete(ID_A)  # a remote-only snapshot, deleted from another instance
    a.delete(ID_B)  # a local one
    # At once, in each one's own listing (a keeps its local copy of ID_A, as before).
    assert ID_A not in listed_ids(central) and listed_ids(a) == [ID_A]
    fs = s3.fs()
    wait_until(lambda: fs.find(f"{bucket}/fleet") == [], 30, "the deletes in the bucket")
    listed_soon(central, [])
    other = open_store("other", url, s3.options)
    refreshed(other)
    assert listed_ids(other) == []


def test_local_retention_bounds_the_cache_not_the_bucket(s3, bucket, open_store):
    url = f"s3://{bucket}/fleet"
    a = open_store("a", url, s3.options, max_count=1)
    publish_one(a, ID_A, payload=b"first")
    wait_until(lambda: uploaded(a), 30, "the first upload")
    publish_one(a, ID_B, payload=b"second")
    wait_until(lambda: uploaded(a), 30, "the second upload")
    assert not (a.profile_dir / ID_A).exists()  # evicted from the local cache ...
    assert listed_ids(a) == [ID_B, ID_A]  # ... still listed and readable, from the bucket
    assert b"".join(a.remote_file(ID_A, "host1.xplane.pb")[1]) == b"first"
    assert [row[:2] for row in a.totals.totals_by_status()] == [("ready", 1)]


def test_retention_never_evicts_a_snapshot_waiting_for_upload(tmp_path, open_store):
    dead = S3Server(free_port())
    a = open_store("a", "s3://nowhere/fleet", dead.fast_fail_options, max_count=1, retry_max_s=60)
    publish_one(a, ID_A)
    publish_one(a, ID_B)
    assert (a.profile_dir / ID_A).is_dir() and (a.profile_dir / ID_B).is_dir()
    assert sync_of(a).pending_count() == 2


def test_pinning_a_remote_snapshot_rewrites_it_in_the_bucket(s3, bucket, open_store):
    url = f"s3://{bucket}/fleet"
    a = open_store("a", url, s3.options)
    publish_one(a, ID_A)
    wait_until(lambda: uploaded(a), 30, "the upload")
    central = open_store("central", url, s3.options)
    listed_soon(central, [ID_A])
    assert central.set_pinned(ID_A, True).pinned
    assert central.get(ID_A).pinned  # at once, here
    wait_until(lambda: uploaded(central), 30, "the rewrite")
    doc = json.loads(s3.fs().cat_file(f"{bucket}/fleet/plugins/profile/{ID_A}/snapshot.json"))
    assert doc["pinned"] is True
    assert open_store("other", url, s3.options).get(ID_A).pinned


def test_downloads_never_leave_the_snapshot(s3, bucket, open_store):
    url = f"s3://{bucket}/fleet"
    a = open_store("a", url, s3.options)
    publish_one(a, ID_A)
    publish_one(a, ID_B)
    wait_until(lambda: uploaded(a), 30, "the uploads")
    central = open_store("central", url, s3.options)
    listed_soon(central, [ID_B, ID_A])
    for name in ("../" + ID_B + "/host1.xplane.pb", "snapshot.json", "x/../host1.xplane.pb", ""):
        with pytest.raises(FileNotFound):
            central.remote_file(ID_A, name)
    with pytest.raises(SnapshotNotFound):
        central.remote_file("../etc", "passwd")


def test_a_file_url_mirror_works_the_same(tmp_path, open_store):
    shared = tmp_path / "shared"
    url = f"file://{shared}"
    a = open_store("a", url, {})
    publish_one(a, ID_A)
    wait_until(lambda: uploaded(a), 30, "the copy")
    assert (shared / "plugins" / "profile" / ID_A / "snapshot.json").is_file()
    b = open_store("b", url, {})
    listed_soon(b, [ID_A])
    b.delete(ID_A)
    wait_until(lambda: not (shared / "plugins" / "profile" / ID_A).exists(), 30, "the delete")


def test_snapshot_ids_stay_run_names_and_carry_48_random_bits():
    ids = {new_snapshot_id("default") for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"\d{8}-\d{6}-default-[0-9a-f]{12}", i) for i in ids)


def test_store_options_are_secret(monkeypatch):
    monkeypatch.setenv("PROFILER_STORE_URL", "s3://bucket/prefix")
    monkeypatch.setenv("PROFILER_STORE_OPTIONS", '{"key": "AKIA", "secret": "hunter2"}')
    settings = Settings()
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.model_dump())
    assert settings.storage.store_options_dict()["secret"] == "hunter2"
    assert "hunter2" not in repr(BucketClient("s3://bucket/prefix", {"secret": "hunter2"}))
    monkeypatch.setenv("PROFILER_STORE_OPTIONS", '{"secret": "hunter2"')
    with pytest.raises(ValueError) as excinfo:
        StorageSettings().store_options_dict()
    assert "hunter2" not in str(excinfo.value)
    monkeypatch.setenv("PROFILER_STORE_URL", "just-a-path")
    with pytest.raises(ValueError, match="must be a URL"):
        Settings()


def test_the_local_index_is_a_cache_rebuilt_from_the_bucket(s3, bucket, tmp_path, open_store):
    url = f"s3://{bucket}/fleet"
    a = open_store("a", url, s3.options)
    publish_one(a, ID_A)
    wait_until(lambda: uploaded(a), 30, "the upload")
    root = tmp_path / "central"
    central = open_mirrored(root, url, s3.options, refresh_interval_s=0)
    listed_soon(central, [ID_A])
    close_mirrored(central)
    (root / "index.sqlite").unlink()
    central = open_mirrored(root, url, s3.options, refresh_interval_s=0)
    try:
        listed_soon(central, [ID_A])
    finally:
        close_mirrored(central)
