"""The sidecar's side of the hub: say who it is, every `hub_heartbeat_s`, for as long as it runs.

With `PROFILER_HUB_URL`: `PUT {hub}/sidecars/{name}` with `Bearer <hub_token>`. With a shared
bucket (`PROFILER_STORE_URL`): the same record at `URL/sidecars/<namespace>.<name>.json`, which
the hub reads at each sync (a hub the sidecar cannot reach still finds it). A failure is logged
(once per kind, until it recovers) and retried at the next beat: it never stops the sidecar. On a
graceful stop the sidecar deregisters; a killed one drops out after the hub's TTL.

It lives beside the sidecar (`service.py` builds it), not in `hub/`: the record it sends is the
neutral `sidecar_record.py`, which the hub reads too, so neither imports the other.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from typing import TYPE_CHECKING

import httpx
from pydantic import SecretStr

from profiler_service import __version__
from profiler_service.config import RegistrationSettings, Settings
from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.sidecar_record import SidecarRecord, record_path

if TYPE_CHECKING:
    from profiler_service.store.bucket_client import BucketClient  # fsspec: only with a bucket

__all__ = ["HubRegistration", "sidecar_record"]

log = logging.getLogger(__name__)


def sidecar_record(settings: Settings) -> SidecarRecord:
    """This sidecar as the hub lists it: who it is, what it captures, where it is reached."""
    capture, server, public_url = settings.capture, settings.server, settings.report.public_url
    name = (capture.pod_name or socket.gethostname()).lower()
    url = settings.registration.advertise_url or public_url
    if url is None:
        host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
        url = f"http://{host}:{server.port}"
    return SidecarRecord(
        name=name,
        namespace=capture.pod_namespace,
        pod=capture.pod_name or name,
        workload=capture.workload,
        targets=capture.target_names,
        url=url,
        public_url=public_url,
        version=__version__,
        heartbeat_s=settings.registration.heartbeat_s,
    )


class HubRegistration(LoopOwner):
    """One daemon thread; `beat()` is one heartbeat (the tests call it directly)."""

    def __init__(
        self,
        settings: RegistrationSettings,
        record: SidecarRecord,
        token: SecretStr | None = None,
        bucket: BucketClient | None = None,
    ):
        """`record`: `sidecar_record(settings)`; `token`: PROFILER_HUB_TOKEN."""
        self.settings = settings
        self.record = record
        self.token = token
        self.bucket = bucket  # the store's BucketClient, with hub_register_in_bucket
        self.beats_total = 0
        self.failures_total = 0
        self._failing: set[str] = set()
        self._loop = BackgroundLoop("hub-heartbeat", self._round)
        self._client = httpx.Client(timeout=min(10.0, settings.heartbeat_s))

    def _headers(self) -> dict[str, str]:
        token = self.token
        return {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}

    def beat(self) -> bool:
        """Register once with the hub and/or the bucket; True when every one took it."""
        ok = True
        if self.settings.url:
            ok &= self._attempt("hub", self._put_hub)
        if self.bucket is not None:
            ok &= self._attempt("bucket", self._put_bucket)
        self.beats_total += 1
        return ok

    def _attempt(self, where: str, call) -> bool:
        try:
            call()
        except Exception as exc:
            self.failures_total += 1
            if where not in self._failing:
                log.warning("could not register with the %s (retrying every %g s): %s",
                            where, self.settings.heartbeat_s, exc)  # fmt: skip
            self._failing.add(where)
            return False
        if where in self._failing:
            log.info("registered with the %s again", where)
            self._failing.discard(where)
        return True

    def _put_hub(self) -> None:
        def put() -> httpx.Response:
            return self._client.put(
                f"{self.settings.url}/sidecars/{self.record.name}",
                content=self.record.model_dump_json(exclude={"last_seen", "via"}),
                headers={**self._headers(), "Content-Type": "application/json"},
            )

        try:
            response = put()
        except httpx.TransportError:
            # The replica behind the kept-alive connection is gone: a new connection reaches a
            # live one through the Service now, not a heartbeat later.
            response = put()
        if response.status_code != 200:
            raise RuntimeError(f"the hub answered {response.status_code}: {response.text[:200]}")

    def _put_bucket(self) -> None:
        from datetime import UTC, datetime

        record = self.record.model_copy(update={"last_seen": datetime.now(UTC), "via": "bucket"})
        self.bucket.put_record(record_path(record), record.model_dump_json().encode())

    def _round(self) -> float:
        self.beat()
        return self.settings.heartbeat_s

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop beating and deregister (best effort: the TTL covers what this misses)."""
        self._loop.stop(timeout_s)
        if self.settings.url:
            try:
                params = {"namespace": self.record.namespace} if self.record.namespace else {}
                self._client.delete(
                    f"{self.settings.url}/sidecars/{self.record.name}",
                    params=params,
                    headers=self._headers(),
                    timeout=2,
                )
            except httpx.HTTPError:
                pass
        if self.bucket is not None:
            with contextlib.suppress(Exception):
                self.bucket.remove_record(record_path(self.record))
        self._client.close()
