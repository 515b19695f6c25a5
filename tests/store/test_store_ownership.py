"""One owner per store (store/ownership.py): another process that opens it is refused and
changes nothing, a reader of its files changes nothing, and a dead owner's store is recovered by
the next one. The owner is a real second process: the lock is the kernel's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_snapshot_store import fake_capture, make_snapshot, publish_one, reopen

from profiler_service.errors import SnapshotBusy, SnapshotNotFound, StoreOwned
from profiler_service.models import SnapshotStatus
from profiler_service.store.file_reads import read_finished_snapshot
from profiler_service.store.ownership import live_owner
from profiler_service.store.snapshot_store import SnapshotStore

# The owner: opens the store, publishes s-ready, leaves s-flight in flight, says so and waits.
OWNER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_snapshot_store import fake_capture, make_snapshot, publish_one
    from profiler_service.store.snapshot_store import SnapshotStore
    store = SnapshotStore(Path({root!r}))
    store.open(url="http://127.0.0.1:18080")
    publish_one(store, "s-ready")
    fake_capture(store.begin(make_snapshot("s-flight")), "s-flight", b"partial")
    print("owning", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def owner(tmp_path: Path):
    root = tmp_path / "store"
    script = OWNER.format(tests=str(Path(__file__).parent), root=str(root))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "owning"
    yield root, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_second_process_is_refused_and_the_capture_in_flight_is_untouched(owner):
    root, proc = owner
    with pytest.raises(StoreOwned) as refused:
        reopen(root)
    detail = refused.value.detail
    assert f"pid {proc.pid}" in detail and "http://127.0.0.1:18080" in detail
    assert "curl -X POST 'http://127.0.0.1:18080/profile" in detail
    assert (root / ".staging" / "s-flight" / "snapshot.json").is_file()
    assert not (root / "failed" / "s-flight").exists()

    recorded = live_owner(root)
    assert recorded is not None and recorded.pid == proc.pid


def test_files_are_read_without_owning_the_store(owner):
    root, proc = owner
    assert read_finished_snapshot(root, "s-ready").status is SnapshotStatus.READY
    with pytest.raises(SnapshotBusy, match=f"pid {proc.pid}"):
        read_finished_snapshot(root, "s-flight")
    with pytest.raises(SnapshotNotFound):
        read_finished_snapshot(root, "s-none")
    assert (root / ".staging" / "s-flight").is_dir()
    with pytest.raises(StoreOwned):  # a reader's look did not take the lock from the owner
        reopen(root)


def test_a_dead_owners_store_is_recovered_by_the_next(owner):
    root, proc = owner
    os.kill(proc.pid, signal.SIGKILL)  # the kernel drops its lock; its record stays
    proc.wait()
    assert live_owner(root) is None
    with pytest.raises(SnapshotBusy, match="next start marks it interrupted"):
        read_finished_snapshot(root, "s-flight")
    store = reopen(root)
    try:
        assert store.get("s-flight").status is SnapshotStatus.INTERRUPTED
        assert store.get("s-ready").status is SnapshotStatus.READY
        assert live_owner(root).pid == os.getpid()
    finally:
        store.close()
    assert live_owner(root) is None  # a clean close says nobody owns it


def test_one_process_owns_a_store_once(tmp_path: Path):
    root = tmp_path / "store"
    first = reopen(root)
    try:
        logdir = first.begin(make_snapshot("s1"))
        fake_capture(logdir, "s1")
        with pytest.raises(StoreOwned):
            SnapshotStore(root).open()
        assert first.get("s1").status is SnapshotStatus.CAPTURING
    finally:
        first.close()
    second = reopen(root)  # closed: the next opener owns it
    second.close()


def test_a_snapshot_the_store_lists_from_the_bucket_is_read_from_its_index(tmp_path: Path):
    root = tmp_path / "store"
    store = reopen(root)
    try:
        published = publish_one(store, "s-moved")
    finally:
        store.close()
    # As the mirror leaves it once retention evicts the local copy: indexed, no local files.
    os.replace(root / "plugins" / "profile" / "s-moved", tmp_path / "elsewhere")
    assert read_finished_snapshot(root, "s-moved").id == published.id
