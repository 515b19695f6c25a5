"""Wires the pipeline stages together; the HTTP app, the CLI and the agent all start here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil
from prometheus_client import CollectorRegistry

from profiler_service.analysis.analyzer import XprofAnalyzer
from profiler_service.analysis.warm_workers import WarmWorkers
from profiler_service.capture.capturer import Capturer
from profiler_service.capture.controller import CaptureController
from profiler_service.capture.remote import RemoteCapturer
from profiler_service.config import Settings
from profiler_service.exporters.gpu_collector import GpuCollector
from profiler_service.exporters.grafana import GrafanaAnnotator, grafana_annotator
from profiler_service.exporters.metrics import CaptureMetrics, ServiceMetrics
from profiler_service.exporters.tf_collector import TFMemoryCollector
from profiler_service.lookback.lead_up import LeadUpRecorder
from profiler_service.lookback.ring import SampleRing
from profiler_service.lookback.sampler import Sampler
from profiler_service.lookback.sources import (
    GpuSource,
    ProcessMemorySource,
    Source,
    StepSource,
    TFMemorySource,
    WatchedProcess,
    memory_limit_bytes,
)
from profiler_service.store import SnapshotStore
from profiler_service.targets import TargetKind
from profiler_service.trigger.alert_log import AlertLog
from profiler_service.trigger.alerts import AlertTrigger
from profiler_service.trigger.memory_watch import MemoryWatch
from profiler_service.trigger.schedule import CaptureScheduler

if TYPE_CHECKING:
    from profiler_service.capture.continuous import ContinuousCapturer
    from profiler_service.hub.registration import HubRegistration
    from profiler_service.store.mirror_sync import MirrorSync


@dataclass
class Service:
    settings: Settings
    store: SnapshotStore
    controller: CaptureController
    metrics: ServiceMetrics | None = None  # GET /metrics; built by build_service
    alerts: AlertTrigger | None = None  # POST /webhooks/...; built by build_service
    annotator: GrafanaAnnotator | None = None  # when a Grafana URL and token are set
    scheduler: CaptureScheduler | None = None  # started by the HTTP app, when schedules are set
    sampler: Sampler | None = None  # the look-back ring's; started by the HTTP app
    memory_watch: MemoryWatch | None = None  # listens to the sampler
    continuous: ContinuousCapturer | None = None  # the look-back trace, when configured
    registration: HubRegistration | None = None  # the fleet hub's heartbeat, when configured
    mirror: MirrorSync | None = None  # the store's bucket mirror, with PROFILER_STORE_URL

    def start(self) -> None:
        """Background work that runs while the service serves: schedules, the look-back, a
        warm analysis worker."""
        self.controller.analyzer.warm()
        if self.scheduler is not None:
            self.scheduler.start()
        if self.sampler is not None:
            self.sampler.start()
        if self.continuous is not None:
            self.continuous.start()
        if self.registration is not None:
            self.registration.start()

    def close(self) -> None:
        if self.registration is not None:
            self.registration.stop()
        if self.continuous is not None:
            self.continuous.close()
        if self.sampler is not None:
            self.sampler.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.annotator is not None:
            self.annotator.close()
        if self.alerts is not None:
            self.alerts.close()
        self.controller.analyzer.close()
        if self.mirror is not None:
            self.mirror.stop()
        self.store.close()


def build_service(
    settings: Settings, capturers: dict[TargetKind, Capturer] | None = None
) -> Service:
    """Open the store (recovering interrupted snapshots) and build the controller."""
    limits = {"max_count": settings.retention_max_count, "max_bytes": settings.retention_max_bytes}
    bucket = None
    mirror: MirrorSync | None = None
    if settings.store_url:
        import socket

        from profiler_service.store.manifest import sidecar_key
        from profiler_service.store.mirror_sync import mirrored_store  # fsspec: sidecar only
        from profiler_service.store.object_store import ObjectStoreMirror

        bucket = ObjectStoreMirror(settings.store_url, settings.store_options_dict())
        pod = (settings.pod_name or socket.gethostname()).lower()
        store, mirror = mirrored_store(
            settings.store,
            bucket,
            refresh_interval_s=settings.store_refresh_s,
            retry_max_s=settings.store_retry_max_s,
            sidecar=sidecar_key(pod, settings.pod_namespace),
            **limits,
        )
    else:
        store = SnapshotStore(settings.store, **limits)
    store.open()
    if mirror is not None:
        mirror.start()  # after open(): it reads the recovered index
    continuous = None
    if capturers is None:
        remote = RemoteCapturer(settings.capture_url)
        if settings.lookback_trace_s > 0:
            from profiler_service.capture.continuous import ContinuousCapturer  # grpcio

            continuous = ContinuousCapturer(settings, fallback=remote)
        capturers = {TargetKind.GRPC: continuous or remote}
    gpu = GpuCollector(max_age_s=1.5 * settings.lookback_interval_s)
    tf_memory = TFMemoryCollector(max_age_s=1.5 * settings.lookback_interval_s)
    sampler = build_sampler(settings, gpu, tf_memory)
    annotator = grafana_annotator(settings)
    registry = CollectorRegistry()
    captures = CaptureMetrics(registry, [t.name for t in settings.targets])
    controller = CaptureController(
        settings,
        store,
        capturers,
        XprofAnalyzer(
            timeout_s=settings.analysis_timeout_s,
            python=settings.analysis_python,
            max_memory_bytes=lambda: analysis_memory_limit(settings),
            workers=WarmWorkers(
                str(settings.analysis_python) if settings.analysis_python else None,
                max_jobs=settings.analysis_worker_max_jobs,
                recycle_bytes=settings.analysis_worker_recycle_bytes,
                idle_s=settings.analysis_worker_idle_s,
            ),
        ),
        lead_up=LeadUpRecorder(settings, sampler),  # records nothing while it has no source
        on_finished=[captures.observe] + ([annotator.on_finished] if annotator else []),
    )
    alerts = AlertTrigger(
        settings, controller, AlertLog(store.root / "webhooks" / "alerts.jsonl").open()
    )
    memory_watch = None
    if sampler is not None and settings.memory_watch:
        memory_watch = MemoryWatch(settings, controller, sampler.ring, sampler.source_of)
        sampler.listeners.append(memory_watch)
    service = Service(
        settings,
        store,
        controller,
        alerts=alerts,
        annotator=annotator,
        scheduler=CaptureScheduler(settings, controller),
        sampler=sampler,
        memory_watch=memory_watch,
        continuous=continuous,
        mirror=mirror,
    )
    if settings.hub_url or (settings.hub_register_in_bucket and bucket is not None):
        from profiler_service.hub.registration import HubRegistration

        in_bucket = bucket if settings.hub_register_in_bucket else None
        service.registration = HubRegistration(settings, in_bucket)
    service.metrics = ServiceMetrics(
        settings,
        controller,
        store,
        registry,
        captures,
        alert_counts=alerts.log.counts,
        annotation_counts=annotator.counts if annotator is not None else None,
        sampler=sampler,
        memory_watch=memory_watch,
        gpu=gpu,
        tf_memory=tf_memory,
        uploads=mirror,
    )
    return service


MIN_ANALYSIS_MEMORY = 256 * 2**20


def analysis_memory_limit(settings: Settings) -> int:
    """PROFILER_ANALYSIS_MAX_MEMORY_BYTES, else 3/4 of what this process's cgroup limit (else
    the host's memory) leaves beside this process: the training job itself, for the agent."""
    if settings.analysis_max_memory_bytes:
        return settings.analysis_max_memory_bytes
    left = memory_limit_bytes() - psutil.Process().memory_info().rss
    return max(MIN_ANALYSIS_MEMORY, left * 3 // 4)


def build_sampler(
    settings: Settings, gpu: GpuCollector, tf_memory: TFMemoryCollector
) -> Sampler | None:
    """The look-back sources each mode can read (lookback/sources.py has the table)."""
    if settings.lookback_s <= 0:
        return None
    if any(t.kind is TargetKind.IN_PROCESS for t in settings.targets):
        sources: list[Source] = [
            StepSource(),
            ProcessMemorySource(limit_bytes=settings.memory_watch_capacity_bytes),
            TFMemorySource(tf_memory, gpu),
            GpuSource(gpu, pid=os.getpid),
        ]
    else:
        watched = WatchedProcess(settings.watch_process) if settings.watch_process else None
        sources = [GpuSource(gpu, pid=watched)]
        if watched is not None:
            sources.insert(
                0,
                ProcessMemorySource(
                    watched, name="proc", limit_bytes=settings.memory_watch_capacity_bytes
                ),
            )
    ring = SampleRing(settings.lookback_s, settings.lookback_interval_s)
    return Sampler(ring, sources, settings.lookback_interval_s)
