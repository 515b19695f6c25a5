"""The store tells what happened (store/events.py): published, evicted, deleted, in the order it
did them, each once its lock is released, so a listener may use the store (and a bucket) freely."""

from __future__ import annotations

import threading
from datetime import timedelta

from test_snapshot_store import T0, publish_one, reopen

from profiler_service.models import new_snapshot_id
from profiler_service.store.events import StoreEvent, StoreEventKind


class Listener:
    """Notes each event, where the store lists the snapshot then, and whether another thread
    could take the store's lock meanwhile (it could not, were the event told under it)."""

    def __init__(self, store):
        self.store = store
        self.heard: list[tuple[StoreEventKind, str, str, str | None, bool]] = []

    def store_changed(self, event: StoreEvent) -> None:
        other = threading.Thread(target=self.store.release, args=("no-such-snapshot",))
        other.start()
        other.join(5)
        stored = self.store.stored(event.snapshot.id)
        where = stored.location if stored is not None else None
        self.heard.append(
            (event.kind, event.snapshot.id, event.location, where, not other.is_alive())
        )


def test_events_come_in_order_after_the_change_and_outside_the_lock(tmp_path):
    store = reopen(tmp_path / "store", max_count=1)
    listener = Listener(store)
    store.subscribe(listener)
    old = new_snapshot_id("job", T0)
    new = new_snapshot_id("job", T0 + timedelta(minutes=1))
    try:
        publish_one(store, old, created_at=T0)
        publish_one(store, new, created_at=T0 + timedelta(minutes=1))  # evicts the older
        store.delete(new)
    finally:
        store.close()
    published, evicted, deleted = (
        StoreEventKind.PUBLISHED,
        StoreEventKind.EVICTED,
        StoreEventKind.DELETED,
    )
    assert listener.heard == [
        (published, old, "ready", "ready", True),
        (published, new, "ready", "ready", True),
        (evicted, old, "", None, True),  # no bucket: gone, not listed as remote
        (deleted, new, "", None, True),
    ]
