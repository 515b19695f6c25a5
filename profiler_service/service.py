"""Wires the pipeline stages together; the HTTP app, the CLI and the agent all start here."""

from __future__ import annotations

from dataclasses import dataclass

from profiler_service.analysis.analyzer import XprofAnalyzer
from profiler_service.capture.capturer import Capturer
from profiler_service.capture.controller import CaptureController
from profiler_service.capture.remote import RemoteCapturer
from profiler_service.config import Settings, TargetKind
from profiler_service.store import SnapshotStore


@dataclass
class Service:
    settings: Settings
    store: SnapshotStore
    controller: CaptureController

    def close(self) -> None:
        self.store.close()


def build_service(
    settings: Settings, capturers: dict[TargetKind, Capturer] | None = None
) -> Service:
    """Open the store (recovering interrupted snapshots) and build the controller."""
    store = SnapshotStore(
        settings.store,
        max_count=settings.retention_max_count,
        max_bytes=settings.retention_max_bytes,
    )
    store.open()
    if capturers is None:
        capturers = {TargetKind.GRPC: RemoteCapturer()}
    controller = CaptureController(
        settings, store, capturers, XprofAnalyzer(timeout_s=settings.analysis_timeout_s)
    )
    return Service(settings, store, controller)
