"""A sidecar's manifest (store/manifest.py) on a real S3 API: one object holds every snapshot.json
it copied, with the version the bucket gave each, and a reader with many snapshots to read takes
them from it; a line older than its snapshot.json is never taken (that one is read itself), an
unchanged manifest is not read again, and a restarted sidecar keeps its earlier lines."""

from __future__ import annotations

import math

import pytest
from s3_server import wait_until
from test_bucket_client import bucket, open_store, s3, sync_of, uploaded  # noqa: F401 (fixtures)
from test_snapshot_store import listed_ids, publish_one

from profiler_service.models import new_snapshot_id
from profiler_service.store import bucket_catalogue
from profiler_service.store.bucket_client import BucketClient
from profiler_service.store.manifest import decode, manifest_path, sidecar_key

SIDECAR = sidecar_key("trainer-0", "ml")
MANIFEST = manifest_path(SIDECAR)


@pytest.fixture(autouse=True)
def few_are_many(monkeypatch):
    """A handful of snapshots stand for a first sync's thousands."""
    monkeypatch.setattr(bucket_catalogue, "MANIFEST_MIN_WANTED", 1)


def manifest_lines(mirror: BucketClient) -> dict[str, int]:
    data = mirror.read_paths([MANIFEST]).get(MANIFEST, b"")
    return {e.id: e.version for e in decode(data)}


def test_a_reader_takes_the_manifest_and_reads_only_what_it_does_not_hold(
    s3,  # noqa: F811
    bucket,  # noqa: F811
    open_store,  # noqa: F811
):
    url = f"s3://{bucket}/fleet"
    sidecar = open_store("sidecar", url, s3.options, sidecar=SIDECAR)
    ids = [new_snapshot_id("trainer") for _ in range(5)]
    for snapshot_id in ids:
        publish_one(sidecar, snapshot_id)
    mirror = BucketClient(url, s3.options)

    def versions() -> dict[str, int]:
        return {i: e.version for i, e in mirror.list_snapshots().items()}

    wait_until(
        lambda: uploaded(sidecar) and manifest_lines(mirror) == versions() and len(versions()) == 5,
        30,
        "the manifest",
    )

    reader = open_store("reader", url, s3.options, refresh_interval_s=math.inf)
    first = sync_of(reader).refresh(force=True)
    assert (first.indexed, first.from_manifests, first.manifests) == (5, 5, 1)
    assert sorted(listed_ids(reader)) == sorted(ids)

    # The sidecar pins one: its snapshot.json and its manifest are rewritten; the reader takes
    # the new line.
    sidecar.set_pinned(ids[0], True)
    wait_until(
        lambda: uploaded(sidecar)
        and manifest_lines(mirror)[ids[0]] == versions()[ids[0]],
        30,
        "the pin in the manifest",
    )  # fmt: skip
    again = sync_of(reader).refresh(force=True)
    assert (again.indexed, again.from_manifests, again.manifests) == (1, 1, 1)
    assert reader.get(ids[0]).pinned

    # A snapshot.json rewritten without its manifest (a sidecar that died between the two): the
    # stale line is not taken, the file itself is read; the unchanged manifest is not read.
    changed = reader.get(ids[1]).model_copy(update={"pinned": True})
    mirror.write_doc(changed)
    third = sync_of(reader).refresh(force=True)
    assert (third.indexed, third.from_manifests, third.manifests) == (1, 0, 0)
    assert reader.get(ids[1]).pinned


def test_a_restarted_sidecar_keeps_the_lines_of_what_it_still_holds(
    s3,  # noqa: F811
    bucket,  # noqa: F811
    open_store,  # noqa: F811
    tmp_path,
):
    url = f"s3://{bucket}/fleet"
    mirror = BucketClient(url, s3.options)
    sidecar = open_store("sidecar", url, s3.options, sidecar=SIDECAR)
    before = new_snapshot_id("trainer")
    publish_one(sidecar, before)
    wait_until(lambda: uploaded(sidecar) and before in manifest_lines(mirror), 30, "manifest")
    sync_of(sidecar).stop()
    sidecar.close()

    again = open_store("sidecar", url, s3.options, sidecar=SIDECAR)  # the same local store
    after = new_snapshot_id("trainer")
    publish_one(again, after)
    wait_until(
        lambda: uploaded(again) and set(manifest_lines(mirror)) == {before, after}, 30, "both"
    )
    listed = mirror.list_snapshots()
    assert manifest_lines(mirror) == {i: listed[i].version for i in (before, after)}
