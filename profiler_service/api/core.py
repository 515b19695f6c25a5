"""What the routes a sidecar and the hub both serve need from their app: the core protocol.

The read routes (`GET /profiles...`), health, `/metrics` and the webhook receiver are the same
code on both; each app puts its own `AppCore` in `app.state.core`. A sidecar's is a `Service`'s
parts (`ServiceCore`, api/sidecar.py: it captures alerts here); the hub's is `HubService` (it
reads the fleet's bucket and routes alerts to sidecars). Neither poses as the other, and
nothing here reads the sidecar's pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from profiler_service.config import AppSettings
from profiler_service.lifecycle import LoopHealth
from profiler_service.models import Snapshot
from profiler_service.store import SnapshotQuery
from profiler_service.targets import Target
from profiler_service.tenancy import EVERYWHERE, Reach
from profiler_service.trigger.alert_log import AlertLog, AlertOutcome
from profiler_service.trigger.webhook_payload import Source, WebhookPayload

__all__ = ["AlertSink", "AppCore", "MetricsPage", "SnapshotReader"]


class SnapshotReader(Protocol):
    """The snapshot reads: a sidecar's store, or the hub's index of the fleet's bucket."""

    def get(self, snapshot_id: str) -> Snapshot: ...

    def list_docs(self, query: SnapshotQuery) -> tuple[list[str], int]: ...

    def file_path(self, snapshot_id: str, name: str) -> Path: ...

    def remote_file(self, snapshot_id: str, name: str) -> tuple[int, Iterator[bytes]]: ...

    def check_writable(self) -> None: ...


class MetricsPage(Protocol):
    """The exposition, held to the namespaces `reach` allows (the hub's tenants; a sidecar
    has none and ignores it)."""

    def render(self, accept: str | None, reach: Reach = EVERYWHERE) -> tuple[bytes, str]: ...


class AlertSink(Protocol):
    """What a webhook receiver does with one payload's alerts: capture them here (a sidecar's
    `AlertTrigger`) or route each to the sidecar it names (the hub's `FleetRouter`); the log
    the receiver records the outcomes in."""

    @property
    def log(self) -> AlertLog: ...

    async def outcomes(
        self, source: Source, data: dict[str, Any], payload: WebhookPayload
    ) -> list[AlertOutcome]: ...


class AppCore(Protocol):
    """What the shared routes read: settings (bounds, links, auth), snapshots, metrics, alerts,
    and the targets this app captures (none for the hub)."""

    @property
    def settings(self) -> AppSettings: ...

    @property
    def targets(self) -> list[Target]: ...

    @property
    def store(self) -> SnapshotReader: ...

    @property
    def metrics(self) -> MetricsPage: ...

    @property
    def alerts(self) -> AlertSink: ...

    def loop_health(self) -> list[LoopHealth]:
        """The background loops started, and what their rounds came to (`/readyz`)."""
        ...
