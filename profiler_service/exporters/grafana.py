"""Grafana annotations for finished captures, so a dashboard shows where a snapshot was taken.

Grafana's HTTP API (docs: "Annotations HTTP API"):

    POST {grafana_url}/api/annotations
    Authorization: Bearer <service-account token with annotations:create>
    {"dashboardUID": "...", "panelId": 2, "time": <epoch ms>, "timeEnd": <epoch ms>,
     "tags": ["..."], "text": "..."}
    -> 200 {"message": "Annotation added", "id": 1}

Without a dashboard the annotation is organisation-wide. The dashboard and panel come from the
alert behind the capture: Grafana's `dashboardURL` / `panelURL` (`/d/<uid>/...?viewPanel=<id>`),
or the annotations `dashboard_uid` / `panel_id` (`__dashboardUid__` / `__panelId__`) a Prometheus
rule can carry. Posting runs on its own thread off a bounded queue, never on a capture's or a
request's path; each annotation is tried `attempts` times with a growing pause (5xx, 429 and
transport errors are retried, other 4xx are not), and every result is counted.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx

from profiler_service.across.verification import headline
from profiler_service.analysis.rule import rank
from profiler_service.config import GrafanaSettings
from profiler_service.exporters.text_report import describe_saving
from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.models import Snapshot, SnapshotStatus, utcnow

__all__ = ["GrafanaAnnotator", "annotation_for", "dashboard_and_panel", "grafana_annotator"]

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000  # annotations waiting to be posted; beyond it they are dropped and counted
BACKOFF_FIRST_S = 0.5  # pause after the first failed attempt, doubled after each next one
BACKOFF_MAX_S = 10.0
_DASHBOARD_PATH = re.compile(r"/d/(?P<uid>[^/?#]+)")
_RESULTS = ("sent", "failed", "retried", "dropped")


def dashboard_and_panel(snapshot: Snapshot) -> tuple[str | None, int | None]:
    """The alert's dashboard UID and panel id, when the trigger says which."""
    trigger = snapshot.trigger
    notes = trigger.annotations
    uid = notes.get("dashboard_uid") or notes.get("__dashboardUid__")
    panel = notes.get("panel_id") or notes.get("__panelId__")
    for url in (trigger.panel_url, trigger.dashboard_url):
        if not url:
            continue
        parts = urlsplit(url)
        match = _DASHBOARD_PATH.search(parts.path)
        if match and not uid:
            uid = match["uid"]
        view = parse_qs(parts.query).get("viewPanel")
        if view and not panel:
            panel = view[0]
    panel_id = None
    if panel:
        digits = str(panel).removeprefix("panel-")  # newer Grafana writes viewPanel=panel-3
        panel_id = int(digits) if digits.isdigit() else None
    return uid, panel_id


def _epoch_ms(value: datetime | None) -> int:
    return int((value or utcnow()).timestamp() * 1000)


def annotation_for(snapshot: Snapshot, public_url: str | None) -> dict[str, Any]:
    """The body of `POST /api/annotations` for one finished snapshot."""
    base = (public_url or "").rstrip("/")
    report = f"{base}/profiles/{quote(snapshot.id)}/report"
    top = min(snapshot.findings, key=rank, default=None)  # "fix this first"
    tags = ["profiler-service", f"target:{snapshot.target}", f"status:{snapshot.status}"]
    if snapshot.trigger.labels.get("alertname"):
        tags.append(f"alert:{snapshot.trigger.labels['alertname']}")
    if top is not None:
        tags.append(f"finding:{top.rule}")
    if snapshot.status is SnapshotStatus.READY:
        what = top.title if top is not None else "no findings"
        saving = describe_saving(top) if top is not None else ""
        if saving:
            what += f"; fix this first, it {saving}"
        if snapshot.verified_against:
            what += ". " + headline(snapshot.verified_against, snapshot.verification)
    else:
        error = snapshot.error
        what = f"capture failed: {error.code}: {error.detail}" if error else "capture failed"
    body: dict[str, Any] = {
        "time": _epoch_ms(snapshot.capture_started_at or snapshot.created_at),
        "timeEnd": _epoch_ms(snapshot.capture_finished_at or snapshot.finished_at),
        "tags": tags,
        "text": (
            f"Profile of {snapshot.target} ({snapshot.capture.duration_ms} ms): {what}. "
            f'<a href="{report}">Report for snapshot {snapshot.id}</a>'
        ),
    }
    uid, panel = dashboard_and_panel(snapshot)
    if uid:
        body["dashboardUID"] = uid
        if panel is not None:
            body["panelId"] = panel
    return body


class GrafanaAnnotator(LoopOwner):
    """Posts one annotation per finished snapshot; `on_finished` is the controller callback."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        public_url: str | None = None,
        attempts: int = 3,
        timeout_s: float = 5.0,
        backoff_s: float = BACKOFF_FIRST_S,
        queue_size: int = QUEUE_SIZE,
        wait: Callable[[float], bool] | None = None,
    ):
        """`wait(seconds)` is the pause before a retry, True when cut short by `stop()`: by
        default a wait on the stop event (a test passes its own, to see the pauses asked)."""
        self.endpoint = url.rstrip("/") + "/api/annotations"
        self.public_url = public_url
        self.attempts = attempts
        self.backoff_s = backoff_s
        self._client = httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {token}"})
        self._queue: queue.Queue[Snapshot | None] = queue.Queue(maxsize=queue_size)
        self._counts = dict.fromkeys(_RESULTS, 0)
        self._lock = threading.Lock()
        self._closing = threading.Event()  # stop(): post what is queued, without retry waits
        self._wait = wait or self._closing.wait
        self._loop = BackgroundLoop("grafana-annotations", self._round)

    def start(self) -> None:
        self._closing.clear()
        self._loop.start()

    def on_finished(self, snapshot: Snapshot) -> None:
        try:
            self._queue.put_nowait(snapshot)
        except queue.Full:
            log.warning("Grafana annotation queue full: dropped the one for %s", snapshot.id)
            self._count("dropped")

    def counts(self) -> dict[str, int]:
        """Annotations sent, failed (after every attempt), retried (attempts), dropped (queue)."""
        with self._lock:
            return dict(self._counts)

    def drain(self, timeout_s: float) -> bool:
        """Wait until every queued annotation was handled (for tests and shutdown)."""
        done = threading.Event()
        threading.Thread(target=lambda: (self._queue.join(), done.set()), daemon=True).start()
        return done.wait(timeout_s)

    def stop(self, timeout_s: float | None = None) -> None:
        """Post what is queued (no retry waits once stopping), for at most `timeout_s`."""
        limit_s = self._loop.join_s if timeout_s is None else timeout_s
        started = time.monotonic()
        self._closing.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)  # wakes a round waiting on an empty queue
        if self._loop.running:
            self.drain(limit_s)
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)  # the first did not fit in a full queue
        self._loop.stop(max(0.0, limit_s - (time.monotonic() - started)))
        self._client.close()

    def _count(self, result: str) -> None:
        with self._lock:
            self._counts[result] += 1

    def _round(self) -> float | None:
        """Post the next queued annotation (waiting for one); an unexpected error counts it
        failed, and the loop's guard logs it. None (stop()'s mark): wait for the stop."""
        snapshot = self._queue.get()
        try:
            if snapshot is None:
                return None
            self._post(snapshot)
        except Exception:
            self._count("failed")
            raise
        finally:
            self._queue.task_done()
        return 0.0

    def _post(self, snapshot: Snapshot) -> None:
        body = annotation_for(snapshot, self.public_url)
        pause_s = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                self._count("retried")
                if self._wait(pause_s):
                    break
                pause_s = min(pause_s * 2, BACKOFF_MAX_S)
            try:
                response = self._client.post(self.endpoint, json=body)
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.is_success:
                    self._count("sent")
                    return
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code < 500 and response.status_code != 429:
                    break  # our request is wrong (token, dashboard): retrying will not help
            log.warning(
                "Grafana annotation for %s, attempt %d/%d: %s",
                snapshot.id,
                attempt,
                self.attempts,
                problem,
            )
        self._count("failed")


def grafana_annotator(
    settings: GrafanaSettings, public_url: str | None = None
) -> GrafanaAnnotator | None:
    """An annotator when both a Grafana URL and a token are configured, else None."""
    if not settings.url or settings.token is None:
        return None
    return GrafanaAnnotator(
        settings.url,
        settings.token.get_secret_value(),
        public_url=public_url,
        attempts=settings.annotation_attempts,
        timeout_s=settings.timeout_s,
    )
