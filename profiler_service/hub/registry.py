"""Who the sidecars are: each one's registration, kept while its heartbeats arrive.

A sidecar registers `PUT /sidecars/{name}` with its pod, namespace, targets and the URL the hub
may dial, again every `hub_heartbeat_s`; or it writes the same record into the shared bucket
(`URL/sidecars/<namespace>.<name>.json`), which the hub reads at every sync. One not heard from
for `hub_sidecar_ttl_s` drops out of every listing and every routing decision. Addresses come
only from these records: the hub never dials an address found in an alert. With several hub
replicas, each also merges what the others heard (`peers.py`): `via` says where a record came
from (`hub`: a heartbeat to this replica; `bucket`: the sidecar's own record; `peer`: another
replica's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel

from profiler_service.sidecar_record import SidecarRecord

__all__ = ["SidecarRegistry", "SidecarsPublic"]


class SidecarsPublic(BaseModel):
    data: list[SidecarRecord]
    count: int


class SidecarRegistry:
    """In memory: rebuilt from the other replicas' shares (peers.py) at start, and from the
    sidecars' heartbeats within one of them."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time):
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, SidecarRecord] = {}
        self._seen_s: dict[str, float] = {}
        self._removed_s: dict[str, float] = {}  # deregistered here: key -> when (for peers)
        self.expired_total = 0
        self.changed = threading.Event()  # a sidecar joined or left: share it now

    def heartbeat(self, record: SidecarRecord, seen_s: float | None = None) -> SidecarRecord:
        """Register or refresh; `seen_s` (epoch seconds) for a record read from the bucket or
        from a peer, which never overrides a fresher one, nor a later deregistration."""
        now = self._clock()
        seen = now if seen_s is None else min(seen_s, now)
        with self._lock:
            if seen_s is not None and (
                self._seen_s.get(record.key, -1.0) > seen
                or self._removed_s.get(record.key, -1.0) >= seen
            ):
                return self._records.get(record.key, record)  # a fresher word wins
            known = self._records.get(record.key)
            record = record.model_copy(update={"last_seen": datetime.fromtimestamp(seen, UTC)})
            self._records[record.key] = record
            self._seen_s[record.key] = seen
            if seen_s is None:
                self._removed_s.pop(record.key, None)
            if known is None or known.url != record.url or known.targets != record.targets:
                self.changed.set()
        return record

    def remove(self, name: str, namespace: str | None, removed_s: float | None = None) -> bool:
        """Forget a sidecar; `removed_s` for a peer's deregistration (older heartbeats stay
        forgotten, newer ones win)."""
        key = f"{namespace or ''}/{name}"
        when = self._clock() if removed_s is None else removed_s
        with self._lock:
            if self._seen_s.get(key, -1.0) > when:
                return False
            self._seen_s.pop(key, None)
            self._removed_s[key] = max(when, self._removed_s.get(key, -1.0))
            self.changed.set()
            return self._records.pop(key, None) is not None

    def heard_here(self) -> tuple[list[tuple[SidecarRecord, float]], dict[str, float]]:
        """What this replica shares: the live records of heartbeats it received itself, with
        when, and its deregistrations within the TTL."""
        horizon = self._clock() - self.ttl_s
        with self._lock:
            for key in [k for k, when in self._removed_s.items() if when < horizon]:
                del self._removed_s[key]
            heard = [
                (r, self._seen_s[k])
                for k, r in self._records.items()
                if r.via == "hub" and self._seen_s[k] >= horizon
            ]
            return heard, dict(self._removed_s)

    def live(self) -> list[SidecarRecord]:
        """Sidecars heard from within the TTL, by namespace and name; the others are dropped."""
        horizon = self._clock() - self.ttl_s
        with self._lock:
            for key in [k for k, seen in self._seen_s.items() if seen < horizon]:
                del self._records[key], self._seen_s[key]
                self.expired_total += 1
            return sorted(self._records.values(), key=lambda r: r.key)
