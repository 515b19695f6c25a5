"""Links from a snapshot to its JSON, its raw files, and its run in TensorBoard/XProf."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from pydantic import BaseModel, Field

from profiler_service.config import ReportSettings
from profiler_service.models import SnapshotHead, SnapshotStatus


class SnapshotLinks(BaseModel):
    self: str
    report: str
    files: dict[str, str] = Field(default_factory=dict)
    tensorboard: str | None = None
    # The alert behind a webhook capture: its Grafana panel, else dashboard, else rule's graph.
    alert: str | None = None


def snapshot_links(
    snapshot: SnapshotHead, settings: ReportSettings, base_url: str = ""
) -> SnapshotLinks:
    base = base_url.rstrip("/")
    own = f"{base}/profiles/{quote(snapshot.id)}"
    links = SnapshotLinks(
        self=own,
        report=f"{own}/report",
        files={f.name: f"{own}/files/{quote(f.name)}" for f in snapshot.files},
    )
    trigger = snapshot.trigger
    links.alert = trigger.panel_url or trigger.dashboard_url or trigger.generator_url
    if settings.tensorboard_url and snapshot.status is SnapshotStatus.READY:
        query = {"run": snapshot.id, "tool": "overview_page"}
        if snapshot.hosts:
            query["host"] = snapshot.hosts[0]
        fragment = "#profile" if settings.tensorboard_flavour == "tensorboard" else ""
        links.tensorboard = f"{settings.tensorboard_url.rstrip('/')}/?{urlencode(query)}{fragment}"
    return links
