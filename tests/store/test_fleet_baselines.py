"""Baselines are found fleet-wide: a sidecar's `PUT /profiles/{id}/baseline` is copied beside the
snapshots in the bucket (store/baselines.py), and the hub's fleet view compares the job with it,
even when it is older than the view's window; a job without one keeps the pinned/oldest rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from s3_server import wait_until
from test_snapshot_store import publish_one

from profiler_service.config import HubSettings
from profiler_service.hub.fleet import build_hub
from profiler_service.hub.views import fleet_view
from profiler_service.models import new_snapshot_id
from profiler_service.store.baselines import fleet_baselines_path, target_key
from profiler_service.store.bucket_client import BucketClient
from profiler_service.store.manifest import sidecar_key
from profiler_service.store.mirror_sync import mirrored_store


def test_the_hub_compares_a_job_with_the_baseline_its_sidecar_set(tmp_path):
    url = f"file://{tmp_path / 'bucket'}"
    (tmp_path / "bucket").mkdir()
    sidecar = sidecar_key("trainer-0", None)
    store, sync = mirrored_store(tmp_path / "sidecar", BucketClient(url), sidecar=sidecar)
    store.open()
    sync.start()
    now = datetime.now(UTC)
    old = new_snapshot_id("trainer", now - timedelta(days=30))
    recent = [new_snapshot_id("trainer", now - timedelta(hours=h)) for h in (3, 2, 1)]
    hub = build_hub(HubSettings(store=tmp_path / "hub", store_url=url, api_token="t"))
    try:
        for snapshot_id, created in [(old, now - timedelta(days=30))] + [
            (i, now - timedelta(hours=h)) for i, h in zip(recent, (3, 2, 1), strict=True)
        ]:
            publish_one(store, snapshot_id, target="trainer", created_at=created)
        store.set_baseline(old, target_key("trainer"))
        copied = tmp_path / "bucket" / fleet_baselines_path(sidecar)
        wait_until(lambda: sync.pending_count() == 0 and copied.is_file(), 30, "the copy")

        hub.fleet_sync.once(force=True)
        assert hub.fleet_sync.baseline_ids == {old}
        (job,) = fleet_view(
            hub.store.fleet, hub.settings, baselines=hub.fleet_sync.baseline_ids
        ).jobs
        assert job.latest.id == recent[-1] and job.baseline.id == old  # 30 days old, still it
        # Without the sidecar's word, the window's rule: the oldest of the 7 days.
        (job,) = fleet_view(hub.store.fleet, hub.settings.report).jobs
        assert job.baseline.id == recent[0]
        # The baseline moves: the hub follows at its next sync.
        store.set_baseline(recent[1], target_key("trainer"))
        wait_until(lambda: recent[1] in copied.read_text(), 30, "the new copy")
        hub.fleet_sync.once(force=True)
        assert hub.fleet_sync.baseline_ids == {recent[1]}
    finally:
        hub.stop()
        sync.stop()
        store.close()
