"""Baselines are pinned, survive retention, and are forgotten with their snapshot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from profiler_service.errors import InvalidRequest
from profiler_service.models import CaptureOptions, Snapshot, SnapshotStatus
from profiler_service.store import SnapshotQuery, SnapshotStore
from profiler_service.store.baselines import label_key, target_key

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def publish(store: SnapshotStore, i: int) -> Snapshot:
    snapshot = Snapshot(
        id=f"20260101-0000{i:02d}-trainer-00000{i}",
        target="trainer",
        created_at=T0 + timedelta(minutes=i),
        capture=CaptureOptions(
            duration_ms=100, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
    )
    logdir = store.begin(snapshot)
    xplane = logdir / "plugins" / "profile" / snapshot.id / "h.xplane.pb"
    xplane.parent.mkdir(parents=True)
    xplane.write_bytes(b"x" * 100)
    store.adopt_capture(snapshot, [xplane])
    return store.publish(snapshot)


def test_baseline_survives_retention_and_newer_unpinned_ones_go(tmp_path):
    store = SnapshotStore(tmp_path, max_count=2)
    store.open()
    first = publish(store, 0)
    store.set_baseline(first.id, target_key("trainer"))
    for i in range(1, 5):
        publish(store, i)
    ids = {s.id for s in store.list(SnapshotQuery())[0]}
    assert first.id in ids and len(ids) == 2
    assert store.baseline(target_key("trainer")).id == first.id
    assert store.get(first.id).pinned


def test_deleting_a_baseline_forgets_it_and_only_ready_snapshots_qualify(tmp_path):
    store = SnapshotStore(tmp_path)
    store.open()
    snapshot = publish(store, 1)
    key = label_key("model=resnet50")
    store.set_baseline(snapshot.id, key)
    assert store.baselines.all() == {key: snapshot.id}
    store.delete(snapshot.id)
    assert store.baselines.all() == {}
    assert store.baseline(key) is None

    failed = Snapshot(
        id="20260101-000009-trainer-000009",
        target="trainer",
        status=SnapshotStatus.FAILED,
        capture=CaptureOptions(
            duration_ms=100, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
    )
    store.begin(failed)
    store.fail(failed, keep_files=False)
    with pytest.raises(InvalidRequest):
        store.set_baseline(failed.id, target_key("trainer"))


@pytest.mark.parametrize("label", ["nolabel", "a=", "=b", "a b=c"])
def test_label_keys_must_be_name_equals_value(label):
    with pytest.raises(ValueError):
        label_key(label)
