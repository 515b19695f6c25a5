"""The record of every webhook alert's outcome: bounded in memory, appended to a file, counted.

    STORE/webhooks/alerts.jsonl     one AlertOutcome a line, newest last
    STORE/webhooks/alerts.jsonl.1   the previous file, once the current one passed its size

Counts are by (source, outcome) since the process started, as a Prometheus counter wants them;
`counts()` is what `/metrics` reads. Alerts a sender left out of its payload (`truncatedAlerts`)
are counted under the outcome `truncated`: they were never seen, but they are not hidden.
`record()` never touches the disk (the webhook routes call it on the event loop): its lines go
to a writer thread that appends them, in order.
At start the last records are read back, so dedupe survives a restart.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import IO

from pydantic import BaseModel, Field

from profiler_service.described import Described
from profiler_service.models import utcnow
from profiler_service.trigger.outcomes import Outcome

__all__ = ["TRUNCATED", "AlertLog", "AlertOutcome", "Reason"]

log = logging.getLogger(__name__)

TRUNCATED = "truncated"
MAX_RECORDS_IN_MEMORY = 1000
MAX_FILE_BYTES = 4 * 1024 * 1024


class Reason(Described):
    """Why an alert was not captured, beside its outcome. A capture the controller refused
    carries the API's error code instead (`capture_in_progress`, `unknown_target`...)."""

    UNKNOWN_STATUS = (
        "unknown_status",
        "The alert's status is neither `firing` nor `resolved` (`rejected`).",
    )
    NO_MATCHING_TARGET = (
        "no_matching_target",
        "No configured target matches the alert (`rejected`); the detail lists the labels "
        "tried, the targets and the rules.",
    )
    INVALID_DURATION = (
        "invalid_duration",
        "The alert's `profile_duration` label or annotation does not parse, or lies outside "
        "the bounds (`rejected`).",
    )
    COOLDOWN = (
        "cooldown",
        "The same alert (fingerprint) was captured within `webhook_cooldown_s` (`deduplicated`).",
    )
    MIN_INTERVAL = (
        "min_interval",
        "Another alert started a capture within `webhook_min_interval_s` (`throttled`).",
    )
    # The fleet hub's
    NO_MATCHING_SIDECAR = (
        "no_matching_sidecar",
        "The fleet hub's: no registered sidecar captures what the alert names (`no_sidecar`).",
    )
    AMBIGUOUS_TARGET = (
        "ambiguous_target",
        "The fleet hub's: several registered sidecars capture what the alert names; the detail "
        "names them (`no_sidecar`).",
    )
    NO_ANSWER = (
        "no_answer",
        "The fleet hub's: the sidecar that captures the alert's target did not answer, or "
        "answered an error (`sidecar_unreachable`).",
    )


class AlertOutcome(BaseModel):
    """What was done with one alert; kept in the alert log and answered to the sender."""

    at: datetime = Field(default_factory=utcnow)
    source: str
    alertname: str | None = None
    fingerprint: str
    status: str
    outcome: Outcome
    # A stable code for rejected/deduplicated/throttled/skipped_busy/no_sidecar: a Reason, or the
    # API's error code (capture_in_progress...); any other string (an older log's, a newer
    # sidecar's answer to the hub) is kept as it is.
    reason: Reason | str | None = Field(default=None, union_mode="left_to_right")
    detail: str
    target: str | None = None
    snapshot_id: str | None = None
    sidecar: str | None = None  # the sidecar the fleet hub routed the alert to
    labels: dict[str, str] = Field(default_factory=dict)

    @property
    def namespace(self) -> str | None:
        """The namespace the alert names, else that of the sidecar it was routed to (whose
        tenants may read it)."""
        if self.labels.get("namespace"):
            return self.labels["namespace"]
        if self.sidecar and "/" in self.sidecar:
            return self.sidecar.split("/", 1)[0] or None
        return None


class AlertLog:
    def __init__(
        self,
        path: Path | None,
        *,
        max_records: int = MAX_RECORDS_IN_MEMORY,
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        self.path = path
        self.max_file_bytes = max_file_bytes
        self._records: deque[AlertOutcome] = deque(maxlen=max_records)
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._file_bytes = 0
        self._pending: queue.SimpleQueue[str | threading.Event | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    def open(self) -> AlertLog:
        """Read back the newest records (current file and the rotated one), then append."""
        if self.path is None:
            return self
        for path in (self.path.with_name(self.path.name + ".1"), self.path):
            if not path.exists():
                continue
            with path.open(encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        self._records.append(AlertOutcome.model_validate_json(line))
                    except ValueError:
                        log.warning("skipping an unreadable line in %s", path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as exc:  # a read-only store: the service still serves what it holds
            log.error("cannot append to the alert log %s (%s): kept in memory only", self.path, exc)
            return self
        self._file_bytes = self.path.stat().st_size
        self._writer = threading.Thread(target=self._write, name="alert-log", daemon=True)
        self._writer.start()
        return self

    def record(self, source: str, outcomes: Iterable[AlertOutcome], truncated: int = 0) -> None:
        lines = []
        with self._lock:
            for outcome in outcomes:
                self._records.append(outcome)
                key = (source, str(outcome.outcome))
                self._counts[key] = self._counts.get(key, 0) + 1
                lines.append(outcome.model_dump_json() + "\n")
            if truncated:
                key = (source, TRUNCATED)
                self._counts[key] = self._counts.get(key, 0) + truncated
        if self._writer is not None and lines:
            self._pending.put("".join(lines))

    def _write(self) -> None:
        """The writer thread: each payload's lines appended whole, in order, until `close()`."""
        while (item := self._pending.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()  # everything queued before it is written
            else:
                self._append(item)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until what was recorded so far is in the file; False if it did not get there
        within `timeout_s` (a disk that hangs)."""
        if self._writer is None:
            return True
        written = threading.Event()
        self._pending.put(written)
        return written.wait(timeout_s)

    def _append(self, text: str) -> None:
        if self._file is None:
            return
        try:
            if self._file_bytes + len(text) > self.max_file_bytes and self._file_bytes > 0:
                self._rotate()
            self._file.write(text)
            self._file.flush()
            self._file_bytes += len(text)
        except OSError:
            log.exception("could not append to the alert log %s (kept in memory)", self.path)

    def _rotate(self) -> None:
        self._file.close()
        self.path.replace(self.path.with_name(self.path.name + ".1"))
        self._file = self.path.open("a", encoding="utf-8")
        self._file_bytes = 0

    def counts(self) -> dict[tuple[str, str], int]:
        """Alerts by (source, outcome) since start: what `/metrics` exports as a counter."""
        with self._lock:
            return dict(self._counts)

    def recent(self, limit: int = 100) -> list[AlertOutcome]:
        """The newest outcomes first."""
        with self._lock:
            records = list(self._records)
        return [r.model_copy() for r in reversed(records[-limit:])] if limit > 0 else []

    def recent_captures(self, since_s: float) -> dict[str, tuple[float, str]]:
        """fingerprint -> (epoch seconds, snapshot id) of captures at or after `since_s`."""
        out: dict[str, tuple[float, str]] = {}
        with self._lock:
            for r in self._records:
                at = r.at.timestamp()
                if r.outcome is Outcome.CAPTURED and r.snapshot_id and at >= since_s:
                    out[r.fingerprint] = (at, r.snapshot_id)
        return out

    def close(self) -> None:
        """Append what is still queued, then close the file."""
        writer, self._writer = self._writer, None
        if writer is not None:
            self._pending.put(None)
            writer.join(timeout=10)
        if self._file is not None:
            self._file.close()
            self._file = None
