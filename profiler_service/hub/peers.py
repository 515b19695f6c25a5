"""Hub replicas share their registries through the fleet's bucket, so any replica routes any alert.

Behind one Service, a sidecar's heartbeats reach one replica (its kept-alive connection's), and
Alertmanager's posts another. Each replica therefore writes what it heard itself to
`URL/hubs/<replica>.json` (the records with when each was heard, and its deregistrations), at
once when a sidecar joins or leaves and at least every `ttl/4`, and reads the other replicas'
files every `SHARE_INTERVAL_S`. A record merges by its own time: the freshest word on a sidecar
wins, so a killed replica's file simply ages out while its sidecars' next heartbeats reach a
live one, which already routes to them. A replica that starts reads every file first: it knows
the fleet before its first request, not a heartbeat later.

Why the bucket and not heartbeats to every replica: the hub already requires it, it needs no
peer discovery (a headless Service, DNS), and it costs a PUT and a LIST + GET per replica every
few seconds, whatever the number of sidecars.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import socket
import time
from collections.abc import Callable

from pydantic import ValidationError

from profiler_service.hub.registry import SidecarRegistry
from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.sidecar_record import SidecarRecord
from profiler_service.store.bucket_client import BucketClient

__all__ = ["PEERS_PREFIX", "RegistryShare", "replica_name"]

log = logging.getLogger(__name__)

PEERS_PREFIX = "hubs"
SHARE_INTERVAL_S = 2.0  # at most; a smaller TTL shortens it (ttl / 4)
STALE_FILE_TTLS = 10  # a replica's file unchanged for this many TTLs is removed by any replica


def replica_name() -> str:
    """This replica's file name: its host (in Kubernetes, the pod's name) and process."""
    name = f"{socket.gethostname()}-{os.getpid()}"
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in name)


class RegistryShare(LoopOwner):
    """One `BackgroundLoop`: publish this replica's heartbeats, merge the others'. `once()` is
    one round (the tests call it); `start()` runs one round first, then the loop."""

    def __init__(
        self,
        bucket: BucketClient,
        registry: SidecarRegistry,
        replica: str,
        clock: Callable[[], float] = time.time,
    ):
        self.bucket = bucket
        self._clock = clock
        self.registry = registry
        self.replica = replica
        self.path = f"{PEERS_PREFIX}/{replica}.json"
        self.interval_s = min(SHARE_INTERVAL_S, registry.ttl_s / 4)
        self.publish_every_s = registry.ttl_s / 4
        self.failures_total = 0
        self.merged_total = 0
        self._published_s = -float("inf")
        self._failing = False
        # A sidecar joining or leaving wakes the loop at once; stop() sets it too.
        self._loop = BackgroundLoop(
            "hub-peers",
            self._round,
            wake=registry.changed,
            wait_first=self.interval_s,  # start() read the others once already
            join_s=10,
        )

    def once(self) -> None:
        try:
            if self.registry.changed.is_set() or (
                time.monotonic() - self._published_s >= self.publish_every_s
            ):
                self.registry.changed.clear()
                self.publish()
            self.merge()
        except Exception as exc:  # the bucket is down: keep routing with what is known
            self.failures_total += 1
            if not self._failing:
                log.warning("could not share the registry through %s: %s", self.bucket.url, exc)
            self._failing = True
            return
        if self._failing:
            log.info("sharing the registry through %s again", self.bucket.url)
        self._failing = False

    def publish(self) -> None:
        heard, removed = self.registry.heard_here()
        doc = {
            "replica": self.replica,
            "written_at": self._clock(),
            "sidecars": [
                {"seen_s": seen, "record": r.model_dump(mode="json", exclude={"last_seen"})}
                for r, seen in heard
            ],
            "removed": removed,
        }
        self.bucket.put_record(self.path, json.dumps(doc).encode())
        self._published_s = time.monotonic()

    def merge(self) -> int:
        """Every other replica's records into the registry; returns how many were fresh."""
        now = self._clock()
        horizon = now - self.registry.ttl_s
        merged = 0
        for path, data in self.bucket.read_records(PEERS_PREFIX).items():
            if posixpath.basename(path) == posixpath.basename(self.path):
                continue
            try:
                doc = json.loads(data)
                written = float(doc["written_at"])
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("skipping the replica file %s: %s", path, exc)
                continue
            if written < now - STALE_FILE_TTLS * self.registry.ttl_s:
                self._remove_stale(path)
                continue
            for key, when in (doc.get("removed") or {}).items():
                namespace, _, name = str(key).partition("/")
                self.registry.remove(name, namespace or None, float(when))
            for item in doc.get("sidecars") or []:
                try:
                    seen = float(item["seen_s"])
                    record = SidecarRecord.model_validate(item["record"])
                except (ValidationError, KeyError, TypeError, ValueError) as exc:
                    log.warning("skipping a record of %s: %s", path, exc)
                    continue
                if seen >= horizon:
                    self.registry.heartbeat(record.model_copy(update={"via": "peer"}), seen)
                    merged += 1
        self.merged_total += merged
        return merged

    def _remove_stale(self, path: str) -> None:
        try:
            self.bucket.remove_record(path)
            log.info("removed the file of a replica gone since long: %s", path)
        except Exception as exc:
            log.warning("could not remove %s: %s", path, exc)

    def start(self) -> None:
        self.once()  # know the fleet before the first request
        self._loop.start()

    def _round(self) -> float:
        """A sidecar joining or leaving is shared at once (it wakes the loop); the rest every
        interval."""
        self.once()
        return self.interval_s

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop sharing; the file stays for the others until its records age out."""
        self._loop.stop(timeout_s)
