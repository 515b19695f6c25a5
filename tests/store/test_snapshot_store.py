"""SnapshotStore: lifecycle, crash recovery, index rebuild, listing, delete and file access."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from profiler_service.api.schemas import page_cursor, parse_cursor
from profiler_service.errors import FileNotFound, SnapshotBusy, SnapshotNotFound
from profiler_service.models import (
    CaptureOptions,
    Snapshot,
    SnapshotError,
    SnapshotStatus,
    Trigger,
    TriggerKind,
)
from profiler_service.store.index import SnapshotQuery
from profiler_service.store.snapshot_store import SnapshotStore

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def make_snapshot(
    snapshot_id: str,
    *,
    created_at: datetime = T0,
    target: str = "job",
    kind: TriggerKind = TriggerKind.API,
) -> Snapshot:
    return Snapshot(
        id=snapshot_id,
        target=target,
        workers=["127.0.0.1:6009"],
        trigger=Trigger(kind=kind),
        capture=CaptureOptions(
            duration_ms=500, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        created_at=created_at,
    )


def fake_capture(logdir: Path, snapshot_id: str, payload: bytes = b"xplane-bytes") -> list[Path]:
    """Write what the profiler writes: <logdir>/plugins/profile/<run>/<host>.xplane.pb."""
    run = logdir / "plugins" / "profile" / snapshot_id
    run.mkdir(parents=True)
    path = run / "host1.xplane.pb"
    path.write_bytes(payload)
    return [path]


def publish_one(
    store: SnapshotStore, snapshot_id: str, payload: bytes = b"xplane-bytes", **kwargs
) -> Snapshot:
    snapshot = make_snapshot(snapshot_id, **kwargs)
    logdir = store.begin(snapshot)
    store.adopt_capture(snapshot, fake_capture(logdir, snapshot_id, payload))
    snapshot.status = SnapshotStatus.ANALYZING
    store.update(snapshot)
    return store.publish(snapshot)


def fail_one(store: SnapshotStore, snapshot_id: str, *, keep_files: bool, **kwargs) -> Snapshot:
    snapshot = make_snapshot(snapshot_id, **kwargs)
    logdir = store.begin(snapshot)
    store.adopt_capture(snapshot, fake_capture(logdir, snapshot_id))
    snapshot.status = SnapshotStatus.FAILED
    snapshot.error = SnapshotError(code="analysis_failed", detail="boom")
    return store.fail(snapshot, keep_files=keep_files)


def reopen(root: Path, **kwargs) -> SnapshotStore:
    store = SnapshotStore(root, **kwargs)
    store.open()
    return store


def listed_ids(store: SnapshotStore, **query) -> list[str]:
    snapshots, _ = store.list(SnapshotQuery(limit=1000, **query))
    return [s.id for s in snapshots]


def profile_run_dirs(root: Path) -> set[Path]:
    """Every directory XProf/TensorBoard would list as a run: `<anything>/plugins/profile/<run>`.

    Walks hidden directories too (XProf's own discovery does).
    """
    runs = set()
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here.name == "profile" and here.parent.name == "plugins":
            runs.update(here / d for d in dirnames)
    return runs


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path):
    s = reopen(root)
    yield s
    s.close()


# ---- lifecycle ----------------------------------------------------------------------------


def test_begin_returns_absolute_capture_logdir_under_staging(store: SnapshotStore, root: Path):
    snapshot = make_snapshot("s1")
    logdir = store.begin(snapshot)
    assert logdir.is_absolute()
    assert logdir == root.resolve() / ".staging" / "s1" / "capture"
    assert logdir.is_dir()
    assert (root / ".staging" / "s1" / "snapshot.json").is_file()


def test_in_flight_snapshot_is_not_published_nor_listed_as_ready(store: SnapshotStore, root: Path):
    snapshot = make_snapshot("s1")
    logdir = store.begin(snapshot)
    final = root / "plugins" / "profile" / "s1"
    assert not final.exists()
    paths = fake_capture(logdir, "s1")
    assert not final.exists()
    store.adopt_capture(snapshot, paths)
    snapshot.status = SnapshotStatus.ANALYZING
    store.update(snapshot)
    assert not final.exists()
    assert "s1" not in listed_ids(store, status="ready")
    assert store.get("s1").status is SnapshotStatus.ANALYZING


def test_publish_moves_files_and_snapshot_json_into_plugins_profile(
    store: SnapshotStore, root: Path
):
    snapshot = make_snapshot("s1")
    logdir = store.begin(snapshot)
    store.adopt_capture(snapshot, fake_capture(logdir, "s1", b"12345"))
    published = store.publish(snapshot)

    final = root / "plugins" / "profile" / "s1"
    assert (final / "host1.xplane.pb").read_bytes() == b"12345"
    doc = json.loads((final / "snapshot.json").read_text())
    assert doc["status"] == "ready"
    assert doc["files"] == [{"name": "host1.xplane.pb", "size_bytes": 5}]
    assert published.status is SnapshotStatus.READY
    assert published.finished_at is not None
    assert not (root / ".staging" / "s1").exists()
    assert store.get("s1").status is SnapshotStatus.READY
    assert listed_ids(store, status="ready") == ["s1"]


def test_adopt_capture_removes_the_profilers_logdir(store: SnapshotStore, root: Path):
    snapshot = make_snapshot("s1")
    logdir = store.begin(snapshot)
    run_dir = store.adopt_capture(snapshot, fake_capture(logdir, "s1"))
    assert not logdir.exists()
    assert run_dir == store.staging_run_dir("s1")
    assert (run_dir / "host1.xplane.pb").is_file()
    assert [f.name for f in snapshot.files] == ["host1.xplane.pb"]


def test_only_published_runs_are_under_any_plugins_profile_dir(store: SnapshotStore, root: Path):
    publish_one(store, "done")
    snapshot = make_snapshot("inflight")
    logdir = store.begin(snapshot)
    store.adopt_capture(snapshot, fake_capture(logdir, "inflight"))
    snapshot.status = SnapshotStatus.ANALYZING
    store.update(snapshot)

    assert profile_run_dirs(root) == {root.resolve() / "plugins" / "profile" / "done"}
    assert not any("inflight" in str(p) for p in root.glob("**/plugins/profile/*"))


# ---- crash recovery -----------------------------------------------------------------------


def test_restart_marks_in_flight_snapshot_interrupted_and_drops_partial_files(root: Path):
    first = reopen(root)
    snapshot = make_snapshot("s1")
    logdir = first.begin(snapshot)
    fake_capture(logdir, "s1", b"partial")
    first.close()  # the process dies here; nothing else is written

    second = reopen(root)
    try:
        recovered = second.get("s1")
        assert recovered.status is SnapshotStatus.INTERRUPTED
        assert recovered.error is not None
        assert recovered.error.code == "interrupted"
        assert recovered.files == []
        failed = root / "failed" / "s1"
        assert (failed / "snapshot.json").is_file()
        assert json.loads((failed / "snapshot.json").read_text())["status"] == "interrupted"
        assert not list(failed.rglob("*.xplane.pb"))
        assert not (failed / "capture").exists()
        assert not (root / "plugins" / "profile" / "s1").exists()
        assert profile_run_dirs(root) == set()
        assert list((root / ".staging").iterdir()) == []
        assert listed_ids(second, status="interrupted") == ["s1"]
    finally:
        second.close()


def test_restart_marks_analyzing_snapshot_interrupted_and_drops_adopted_files(root: Path):
    first = reopen(root)
    snapshot = make_snapshot("s1")
    logdir = first.begin(snapshot)
    first.adopt_capture(snapshot, fake_capture(logdir, "s1"))
    snapshot.status = SnapshotStatus.ANALYZING
    first.update(snapshot)
    first.close()

    second = reopen(root)
    try:
        assert second.get("s1").status is SnapshotStatus.INTERRUPTED
        assert not (root / "failed" / "s1" / "run").exists()
        assert list((root / ".staging").iterdir()) == []
    finally:
        second.close()


def test_restart_removes_staging_left_after_publish_rename(root: Path):
    first = reopen(root)
    published = publish_one(first, "s1")
    first.close()
    # Simulate a stop between publish's rename and its removal of the staging directory.
    staging = root / ".staging" / "s1"
    staging.mkdir(parents=True)
    leftover = published.model_copy(update={"status": SnapshotStatus.ANALYZING})
    (staging / "snapshot.json").write_text(leftover.model_dump_json())

    second = reopen(root)
    try:
        assert not staging.exists()
        assert second.get("s1").status is SnapshotStatus.READY
        assert not (root / "failed" / "s1").exists()
        assert (root / "plugins" / "profile" / "s1" / "host1.xplane.pb").is_file()
    finally:
        second.close()


def test_restart_drops_unreadable_staging_and_stray_entries(root: Path):
    reopen(root).close()
    (root / ".staging" / "broken").mkdir()
    (root / ".staging" / "broken" / "snapshot.json").write_text("{not json")
    (root / ".staging" / ".trash-old").mkdir()
    second = reopen(root)
    try:
        assert list((root / ".staging").iterdir()) == []
        assert listed_ids(second) == []
    finally:
        second.close()


# ---- index rebuild ------------------------------------------------------------------------


def _remove_index(root: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{root / 'index.sqlite'}{suffix}").unlink(missing_ok=True)


def _listing(store: SnapshotStore) -> list[tuple[str, str]]:
    snapshots, _ = store.list(SnapshotQuery(limit=100))
    return [(s.id, s.status.value) for s in snapshots]


def test_lost_index_is_rebuilt_from_snapshot_json(root: Path):
    first = reopen(root)
    publish_one(first, "a", created_at=T0)
    publish_one(first, "b", created_at=T0 + timedelta(minutes=1))
    fail_one(first, "c", keep_files=False, created_at=T0 + timedelta(minutes=2))
    before = _listing(first)
    first.close()
    _remove_index(root)

    second = reopen(root)
    try:
        assert before == [("c", "failed"), ("b", "ready"), ("a", "ready")]
        assert _listing(second) == before
        assert second.get("a").files[0].name == "host1.xplane.pb"
    finally:
        second.close()


def test_corrupt_index_is_replaced_and_rebuilt(root: Path):
    first = reopen(root)
    publish_one(first, "a", created_at=T0)
    publish_one(first, "b", created_at=T0 + timedelta(minutes=1))
    first.close()
    _remove_index(root)
    (root / "index.sqlite").write_bytes(b"\x00garbage, not an sqlite file\xff" * 200)

    second = reopen(root)
    try:
        assert _listing(second) == [("b", "ready"), ("a", "ready")]
    finally:
        second.close()


def test_snapshot_removed_by_hand_disappears_from_index_on_open(root: Path):
    first = reopen(root)
    publish_one(first, "a", created_at=T0)
    publish_one(first, "b", created_at=T0 + timedelta(minutes=1))
    first.close()
    shutil.rmtree(root / "plugins" / "profile" / "a")

    second = reopen(root)
    try:
        assert listed_ids(second) == ["b"]
        with pytest.raises(SnapshotNotFound):
            second.get("a")
    finally:
        second.close()


def test_snapshot_json_edited_by_hand_is_reindexed_on_open(root: Path):
    first = reopen(root)
    publish_one(first, "a")
    first.close()
    doc_path = root / "plugins" / "profile" / "a" / "snapshot.json"
    before_ns = doc_path.stat().st_mtime_ns
    doc = json.loads(doc_path.read_text())
    assert doc["pinned"] is False
    doc["pinned"] = True
    doc_path.write_text(json.dumps(doc))
    # A later edit: make sure the mtime moved even on filesystems with coarse timestamps.
    os.utime(doc_path, ns=(before_ns + 10**9, before_ns + 10**9))

    second = reopen(root)
    try:
        assert second.get("a").pinned is True
        snapshots, _ = second.list(SnapshotQuery())
        assert [s.pinned for s in snapshots] == [True]
    finally:
        second.close()


# ---- listing ------------------------------------------------------------------------------


@pytest.fixture
def populated(store: SnapshotStore) -> SnapshotStore:
    publish_one(store, "s0", created_at=T0, target="alpha", kind=TriggerKind.API)
    publish_one(
        store, "s1", created_at=T0 + timedelta(hours=1), target="beta", kind=TriggerKind.WEBHOOK
    )
    fail_one(
        store,
        "s2",
        keep_files=False,
        created_at=T0 + timedelta(hours=2),
        target="alpha",
        kind=TriggerKind.CLI,
    )
    publish_one(
        store, "s3", created_at=T0 + timedelta(hours=3), target="alpha", kind=TriggerKind.WEBHOOK
    )
    publish_one(
        store, "s4", created_at=T0 + timedelta(hours=4), target="beta", kind=TriggerKind.API
    )
    return store


def test_list_is_newest_first_with_total(populated: SnapshotStore):
    snapshots, total = populated.list(SnapshotQuery())
    assert [s.id for s in snapshots] == ["s4", "s3", "s2", "s1", "s0"]
    assert total == 5


def test_keyset_pages_walk_the_listing_once_and_the_count_is_of_every_match(
    populated: SnapshotStore,
):
    walked, before = [], None
    while True:
        page, total = populated.list(SnapshotQuery(limit=2, before=before))
        assert total == 5
        walked += [s.id for s in page]
        if len(page) < 2:
            break
        before = parse_cursor(page_cursor(page[-1]))
    assert walked == ["s4", "s3", "s2", "s1", "s0"]


def test_list_filters_by_status(populated: SnapshotStore):
    assert listed_ids(populated, status="ready") == ["s4", "s3", "s1", "s0"]
    assert listed_ids(populated, status="failed") == ["s2"]
    assert listed_ids(populated, status="interrupted") == []


def test_list_filters_by_trigger_kind(populated: SnapshotStore):
    assert listed_ids(populated, trigger="webhook") == ["s3", "s1"]
    assert listed_ids(populated, trigger="cli") == ["s2"]
    assert listed_ids(populated, trigger="schedule") == []


def test_list_filters_by_target(populated: SnapshotStore):
    assert listed_ids(populated, target="alpha") == ["s3", "s2", "s0"]
    assert listed_ids(populated, target="beta") == ["s4", "s1"]
    assert listed_ids(populated, target="gamma") == []


def test_list_since_is_inclusive_and_until_exclusive(populated: SnapshotStore):
    assert listed_ids(populated, since=T0 + timedelta(hours=2)) == ["s4", "s3", "s2"]
    assert listed_ids(populated, until=T0 + timedelta(hours=2)) == ["s1", "s0"]
    assert listed_ids(
        populated, since=T0 + timedelta(minutes=30), until=T0 + timedelta(hours=3, seconds=1)
    ) == ["s3", "s2", "s1"]


def test_list_combines_filters(populated: SnapshotStore):
    assert listed_ids(populated, status="ready", target="alpha", trigger="webhook") == ["s3"]


def test_list_pages_with_limit_and_offset_and_reports_total(populated: SnapshotStore):
    page, total = populated.list(SnapshotQuery(limit=2, offset=0))
    assert ([s.id for s in page], total) == (["s4", "s3"], 5)
    page, total = populated.list(SnapshotQuery(limit=2, offset=2))
    assert ([s.id for s in page], total) == (["s2", "s1"], 5)
    page, total = populated.list(SnapshotQuery(limit=2, offset=4))
    assert ([s.id for s in page], total) == (["s0"], 5)
    page, total = populated.list(SnapshotQuery(status="ready", limit=1, offset=1))
    assert ([s.id for s in page], total) == (["s3"], 4)


# ---- retention through the store ----------------------------------------------------------


def test_max_count_evicts_oldest_snapshots(root: Path):
    store = reopen(root, max_count=3)
    try:
        for i in range(5):
            publish_one(store, f"s{i}", created_at=T0 + timedelta(minutes=i))
        assert listed_ids(store) == ["s4", "s3", "s2"]
        assert not (root / "plugins" / "profile" / "s0").exists()
        assert not (root / "plugins" / "profile" / "s1").exists()
        assert (root / "plugins" / "profile" / "s2").is_dir()
        assert list((root / ".staging").iterdir()) == []
    finally:
        store.close()


def test_pinned_snapshot_survives_retention_and_next_oldest_go(root: Path):
    store = reopen(root, max_count=3)
    try:
        publish_one(store, "s0", created_at=T0)
        pinned = store.set_pinned("s0", True)
        assert pinned.pinned is True
        doc = json.loads((root / "plugins" / "profile" / "s0" / "snapshot.json").read_text())
        assert doc["pinned"] is True
        for i in range(1, 5):
            publish_one(store, f"s{i}", created_at=T0 + timedelta(minutes=i))
        assert listed_ids(store) == ["s4", "s3", "s0"]
        assert (root / "plugins" / "profile" / "s0" / "host1.xplane.pb").is_file()
        assert not (root / "plugins" / "profile" / "s1").exists()
        assert not (root / "plugins" / "profile" / "s2").exists()
    finally:
        store.close()


def test_byte_budget_evicts_oldest_snapshots(root: Path):
    # Each snapshot is a 10,000-byte xplane plus a snapshot.json well under 2,500 bytes.
    store = reopen(root, max_bytes=25_000)
    try:
        for i in range(4):
            publish_one(store, f"s{i}", payload=b"x" * 10_000, created_at=T0 + timedelta(minutes=i))
        assert listed_ids(store) == ["s3", "s2"]
        assert not (root / "plugins" / "profile" / "s0").exists()
        assert not (root / "plugins" / "profile" / "s1").exists()
    finally:
        store.close()


def test_in_flight_snapshot_is_not_evicted(root: Path):
    store = reopen(root, max_count=1)
    try:
        old = make_snapshot("old", created_at=T0)
        store.begin(old)
        publish_one(store, "s1", created_at=T0 + timedelta(minutes=1))
        publish_one(store, "s2", created_at=T0 + timedelta(minutes=2))
        assert (root / ".staging" / "old" / "snapshot.json").is_file()
        assert store.get("old").status is SnapshotStatus.CAPTURING
        assert listed_ids(store, status="ready") == ["s2"]
    finally:
        store.close()


# ---- delete -------------------------------------------------------------------------------


def test_delete_removes_a_ready_snapshot(store: SnapshotStore, root: Path):
    publish_one(store, "s1")
    store.delete("s1")
    assert not (root / "plugins" / "profile" / "s1").exists()
    assert listed_ids(store) == []
    with pytest.raises(SnapshotNotFound):
        store.get("s1")
    assert list((root / ".staging").iterdir()) == []


def test_delete_removes_a_failed_snapshot(store: SnapshotStore, root: Path):
    fail_one(store, "s1", keep_files=True)
    store.delete("s1")
    assert not (root / "failed" / "s1").exists()
    assert listed_ids(store) == []


def test_delete_of_in_flight_snapshot_is_refused(store: SnapshotStore, root: Path):
    store.begin(make_snapshot("s1"))
    with pytest.raises(SnapshotBusy):
        store.delete("s1")
    assert (root / ".staging" / "s1" / "snapshot.json").is_file()
    assert store.get("s1").status is SnapshotStatus.CAPTURING


def test_delete_of_unknown_id_is_not_found(store: SnapshotStore):
    with pytest.raises(SnapshotNotFound):
        store.delete("nope")


@pytest.mark.parametrize("bad_id", ["../etc", "a/b", "..", ".", "", "/etc", "a/../b", "..\\x"])
def test_delete_of_path_like_id_is_not_found(store: SnapshotStore, root: Path, bad_id: str):
    publish_one(store, "s1")
    with pytest.raises(SnapshotNotFound):
        store.delete(bad_id)
    assert (root / "plugins" / "profile" / "s1").is_dir()


def test_set_pinned_of_in_flight_snapshot_is_refused(store: SnapshotStore):
    store.begin(make_snapshot("s1"))
    with pytest.raises(SnapshotBusy):
        store.set_pinned("s1", True)


# ---- file_path ----------------------------------------------------------------------------


def test_file_path_returns_the_xplane_of_a_ready_snapshot(store: SnapshotStore, root: Path):
    publish_one(store, "s1", payload=b"abc")
    path = store.file_path("s1", "host1.xplane.pb")
    assert path == root.resolve() / "plugins" / "profile" / "s1" / "host1.xplane.pb"
    assert path.read_bytes() == b"abc"


@pytest.mark.parametrize(
    "name",
    [
        "snapshot.json",
        "../snapshot.json",
        "../../index.sqlite",
        "../../../index.sqlite",
        "/etc/passwd",
        "missing.xplane.pb",
        "",
        ".",
    ],
)
def test_file_path_refuses_anything_but_the_snapshots_files(store: SnapshotStore, name: str):
    publish_one(store, "s1")
    with pytest.raises(FileNotFound):
        store.file_path("s1", name)


def test_file_path_of_listed_file_deleted_from_disk_is_not_found(store: SnapshotStore, root: Path):
    publish_one(store, "s1")
    (root / "plugins" / "profile" / "s1" / "host1.xplane.pb").unlink()
    with pytest.raises(FileNotFound):
        store.file_path("s1", "host1.xplane.pb")


def test_file_path_of_unknown_snapshot_is_snapshot_not_found(store: SnapshotStore):
    with pytest.raises(SnapshotNotFound):
        store.file_path("nope", "host1.xplane.pb")
    with pytest.raises(SnapshotNotFound):
        store.file_path("../plugins", "host1.xplane.pb")


def test_file_path_of_in_flight_snapshot_is_not_found(store: SnapshotStore):
    snapshot = make_snapshot("s1")
    logdir = store.begin(snapshot)
    store.adopt_capture(snapshot, fake_capture(logdir, "s1"))
    snapshot.status = SnapshotStatus.ANALYZING
    store.update(snapshot)
    with pytest.raises(FileNotFound):
        store.file_path("s1", "host1.xplane.pb")


# ---- fail ---------------------------------------------------------------------------------


def test_fail_keeping_files_moves_run_to_failed_and_serves_them(store: SnapshotStore, root: Path):
    failed = fail_one(store, "s1", keep_files=True)
    run = root / "failed" / "s1" / "run"
    assert (run / "host1.xplane.pb").read_bytes() == b"xplane-bytes"
    assert [f.name for f in failed.files] == ["host1.xplane.pb"]
    doc = json.loads((root / "failed" / "s1" / "snapshot.json").read_text())
    assert doc["status"] == "failed"
    assert doc["error"]["code"] == "analysis_failed"
    assert not (root / ".staging" / "s1").exists()
    assert not (root / "plugins" / "profile" / "s1").exists()
    assert profile_run_dirs(root) == set()
    assert store.get("s1").status is SnapshotStatus.FAILED
    assert store.file_path("s1", "host1.xplane.pb") == run.resolve() / "host1.xplane.pb"
    with pytest.raises(FileNotFound):
        store.file_path("s1", "snapshot.json")
    with pytest.raises(FileNotFound):
        store.file_path("s1", "../snapshot.json")


def test_fail_without_keeping_files_removes_them(store: SnapshotStore, root: Path):
    failed = fail_one(store, "s1", keep_files=False)
    assert failed.files == []
    assert (root / "failed" / "s1" / "snapshot.json").is_file()
    assert not (root / "failed" / "s1" / "run").exists()
    assert not list((root / "failed" / "s1").rglob("*.xplane.pb"))
    assert not (root / ".staging" / "s1").exists()
    with pytest.raises(FileNotFound):
        store.file_path("s1", "host1.xplane.pb")


def test_fail_during_capture_drops_the_profilers_logdir(store: SnapshotStore, root: Path):
    snapshot = make_snapshot("s1")
    logdir = store.begin(snapshot)
    fake_capture(logdir, "s1")
    snapshot.status = SnapshotStatus.FAILED
    snapshot.error = SnapshotError(code="target_unreachable", detail="nothing listening")
    store.fail(snapshot, keep_files=True)
    assert not (root / "failed" / "s1" / "capture").exists()
    assert not list((root / "failed" / "s1").rglob("*.xplane.pb"))
    assert store.get("s1").error == SnapshotError(
        code="target_unreachable", detail="nothing listening"
    )


def test_the_listing_read_from_stored_texts_is_each_snapshot_without_its_analysis(tmp_path):
    """GET /profiles reads list items from snapshot.json texts (api/schemas.snapshots_page_json):
    SnapshotPublic's JSON without the summary and lead-up, findings as rule, severity and
    title, links included."""
    import json

    from profiler_service.analysis.models import Finding, Severity
    from profiler_service.api.schemas import SnapshotPublic, snapshots_page_json
    from profiler_service.config import ReportSettings
    from profiler_service.models import (
        CaptureOptions,
        Snapshot,
        SnapshotFile,
        SnapshotStatus,
        Trigger,
    )
    from profiler_service.store.index import SnapshotIndex, SnapshotQuery

    settings = ReportSettings(tensorboard_url="http://xprof:8791")
    index = SnapshotIndex(tmp_path / "index.sqlite")
    finding = Finding(rule="r", severity=Severity.WARNING, title="t", evidence={"x": 1})
    snapshots = [
        Snapshot(
            id=f"20261203-0000{i:02d}-t-{i:012x}", target="t", status=SnapshotStatus.READY,
            capture=CaptureOptions(duration_ms=1, host_tracer_level=2, python_tracer_level=0,
                                   device_tracer_level=1),
            files=[SnapshotFile(name="h 1.xplane.pb", size_bytes=3)] if i else [],
            trigger=Trigger(generator_url="http://prom/graph", panel_url=None),
            findings=[finding] * i,
        )
        for i in range(3)
    ]  # fmt: skip
    index.upsert_many([(s, "ready", 0, 1) for s in snapshots])
    docs, total = index.query_docs(SnapshotQuery())
    listed = json.loads(snapshots_page_json(docs, total, 50, 0, settings))
    parsed, _ = index.query(SnapshotQuery())
    built = []
    for snapshot in parsed:
        whole = json.loads(SnapshotPublic.of(snapshot, settings).model_dump_json())
        del whole["summary"], whole["lead_up"]
        whole["findings"] = [{"rule": "r", "severity": "warning", "title": "t"}] * len(
            whole["findings"]
        )
        built.append(whole)
    page = {"data": built, "count": 3, "count_capped": False, "limit": 50, "offset": 0}
    assert listed == {**page, "next": None}
    assert [len(item["findings"]) for item in listed["data"]] == [2, 1, 0]
    assert listed["data"][0]["links"]["tensorboard"].endswith("&host=h+1")
