"""Wires the pipeline stages together; the HTTP app, the CLI and the agent all start here."""

from __future__ import annotations

from dataclasses import dataclass

from profiler_service.analysis.analyzer import XprofAnalyzer
from profiler_service.capture.capturer import Capturer
from profiler_service.capture.controller import CaptureController
from profiler_service.capture.remote import RemoteCapturer
from profiler_service.config import Settings, TargetKind
from profiler_service.exporters.grafana import GrafanaAnnotator, grafana_annotator
from profiler_service.exporters.metrics import ServiceMetrics
from profiler_service.store import SnapshotStore
from profiler_service.trigger.alert_log import AlertLog
from profiler_service.trigger.alerts import AlertTrigger
from profiler_service.trigger.schedule import CaptureScheduler


@dataclass
class Service:
    settings: Settings
    store: SnapshotStore
    controller: CaptureController
    metrics: ServiceMetrics | None = None  # GET /metrics; built by build_service
    alerts: AlertTrigger | None = None  # POST /webhooks/...; built by build_service
    annotator: GrafanaAnnotator | None = None  # when a Grafana URL and token are set
    scheduler: CaptureScheduler | None = None  # started by the HTTP app, when schedules are set

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.annotator is not None:
            self.annotator.close()
        if self.alerts is not None:
            self.alerts.close()
        self.store.close()


def build_service(
    settings: Settings, capturers: dict[TargetKind, Capturer] | None = None
) -> Service:
    """Open the store (recovering interrupted snapshots) and build the controller."""
    mirror = None
    if settings.store_url:
        from profiler_service.store.object_store import ObjectStoreMirror

        mirror = ObjectStoreMirror(settings.store_url, settings.store_options_dict())
    store = SnapshotStore(
        settings.store,
        max_count=settings.retention_max_count,
        max_bytes=settings.retention_max_bytes,
        mirror=mirror,
        refresh_interval_s=settings.store_refresh_s,
        retry_max_s=settings.store_retry_max_s,
    )
    store.open()
    if capturers is None:
        capturers = {TargetKind.GRPC: RemoteCapturer(settings.capture_url)}
    controller = CaptureController(
        settings, store, capturers, XprofAnalyzer(timeout_s=settings.analysis_timeout_s)
    )
    alerts = AlertTrigger(
        settings, controller, AlertLog(store.root / "webhooks" / "alerts.jsonl").open()
    )
    annotator = grafana_annotator(settings)
    if annotator is not None:
        controller.on_finished.append(annotator.on_finished)
    service = Service(
        settings,
        store,
        controller,
        alerts=alerts,
        annotator=annotator,
        scheduler=CaptureScheduler(settings, controller),
    )
    service.metrics = ServiceMetrics(service)
    return service
