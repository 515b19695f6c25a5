"""Wires the pipeline stages together; the HTTP app, the CLI and the agent all start here.

`build_service` builds (and opens the store); `Service.start` starts the background parts in
order and `Service.stop` stops them in reverse (lifecycle.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil
from prometheus_client import CollectorRegistry

from profiler_service.analysis.runner.analyzer import XprofAnalyzer
from profiler_service.analysis.runner.warm_workers import WarmWorkers
from profiler_service.capture.capturer import Capturer
from profiler_service.capture.controller import CaptureController
from profiler_service.capture.py_spy_capturer import PySpyCapturer
from profiler_service.capture.remote import RemoteCapturer
from profiler_service.config import AnalysisSettings, Settings
from profiler_service.exporters.gpu_collector import GpuCollector
from profiler_service.exporters.grafana import GrafanaAnnotator, grafana_annotator
from profiler_service.exporters.metrics import CaptureMetrics, ServiceMetrics
from profiler_service.exporters.tf_collector import TFMemoryCollector
from profiler_service.lifecycle import Component, Lifecycle
from profiler_service.lookback.lead_up import LeadUpRecorder
from profiler_service.lookback.ring import SampleRing
from profiler_service.lookback.sampler import Sampler
from profiler_service.lookback.sources import (
    SIDECAR_STEPS_HINT,
    UNWATCHED_HINT,
    GpuSource,
    JobMetricsSource,
    NotRead,
    ProcessCpuSource,
    ProcessMemorySource,
    Source,
    StepSource,
    TFMemorySource,
    WatchedProcess,
    memory_limit_bytes,
)
from profiler_service.store import SnapshotStore
from profiler_service.targets import TargetKind
from profiler_service.trigger import alerts, memory_watch, schedule
from profiler_service.trigger.alerts import AlertTrigger
from profiler_service.trigger.memory_watch import MemoryWatch
from profiler_service.trigger.plugin import TriggerParts, Triggers, group_of, plugins
from profiler_service.trigger.schedule import CaptureScheduler

if TYPE_CHECKING:
    from profiler_service.capture.continuous import ContinuousCapturer
    from profiler_service.registration import HubRegistration
    from profiler_service.store.mirror_sync import MirrorSync


@dataclass
class Service:
    """A sidecar's (or the agent's) parts, built by `build_service`, which starts nothing."""

    settings: Settings
    store: SnapshotStore
    controller: CaptureController
    metrics: ServiceMetrics | None = None  # GET /metrics; built by build_service
    # What asks for captures besides the API, by plugin (trigger/plugin.py's `plugins()`):
    # alerts (POST /webhooks/...), scheduler (runs only when schedules are set), memory_watch
    # (listens to the sampler, when on).
    triggers: Triggers = field(default_factory=Triggers)
    annotator: GrafanaAnnotator | None = None  # when a Grafana URL and token are set
    sampler: Sampler | None = None  # the look-back ring's
    continuous: ContinuousCapturer | None = None  # the look-back trace, when configured
    registration: HubRegistration | None = None  # the fleet hub's heartbeat, when configured
    mirror: MirrorSync | None = None  # the store's bucket mirror, with PROFILER_STORE_URL
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # what build_service opened

    def start(self, *, serving: bool = True) -> None:
        """Start, in order, what a capture needs (the bucket mirror, a warm analysis worker,
        the Grafana annotator), then, when serving, what runs beside the API: the look-back
        sampler and trace, the schedules, the hub registration. A part already started is not
        started again; the one-off `capture` command starts with `serving=False`."""
        self.controller.analyzer.warm()
        parts: list[Component | None] = [self.mirror, self.annotator]
        if serving:
            running = [t for t in self.triggers.all() if isinstance(t, Component)]
            parts += [self.sampler, self.continuous, *running, self.registration]
        self.lifecycle.start(parts)

    # The triggers the API and the tests name; any other is `triggers.get(its PLUGIN)`.
    @property
    def alerts(self) -> AlertTrigger | None:
        return self.triggers.get(alerts.PLUGIN)

    @property
    def scheduler(self) -> CaptureScheduler | None:
        return self.triggers.get(schedule.PLUGIN)

    @property
    def memory_watch(self) -> MemoryWatch | None:
        return self.triggers.get(memory_watch.PLUGIN)

    def stop(self) -> None:
        """Stop what was started, in reverse, then close what was opened: the analysis
        workers, the alert log, the store."""
        self.lifecycle.stop()


def build_service(
    settings: Settings,
    capturers: dict[TargetKind, Capturer] | None = None,
    *,
    serves_api: bool = True,
) -> Service:
    """Own and open the store (recovering interrupted snapshots; StoreOwned when a live process
    owns it) and build every part; start nothing. `serves_api`: the API will answer at
    `settings.server`, which is told to whoever finds the store owned."""
    lifecycle = Lifecycle()
    storage = settings.storage
    limits = {"max_count": storage.retention_max_count, "max_bytes": storage.retention_max_bytes}
    bucket = None
    mirror: MirrorSync | None = None
    if storage.store_url:
        import socket

        from profiler_service.store.bucket_client import BucketClient
        from profiler_service.store.manifest import sidecar_key
        from profiler_service.store.mirror_sync import mirrored_store  # fsspec: sidecar only

        bucket = BucketClient(storage.store_url, storage.store_options_dict())
        pod = (settings.capture.pod_name or socket.gethostname()).lower()
        store, mirror = mirrored_store(
            storage.store,
            bucket,
            refresh_interval_s=storage.store_refresh_s,
            retry_max_s=storage.store_retry_max_s,
            sidecar=sidecar_key(pod, settings.capture.pod_namespace),
            **limits,
        )
    else:
        store = SnapshotStore(storage.store, **limits)
    store.open(url=settings.server.local_url if serves_api else None)
    lifecycle.closing(store.close)
    continuous = None
    if capturers is None:
        remote = RemoteCapturer(settings.capture.url)
        if settings.lookback.lookback_trace_s > 0:
            from profiler_service.capture.continuous import ContinuousCapturer  # grpcio

            continuous = ContinuousCapturer(
                settings.capture, settings.lookback.lookback_trace_s, fallback=remote
            )
        capture = settings.capture
        capturers = {
            TargetKind.GRPC: PySpyCapturer(
                continuous or remote, capture.py_spy, capture.python_stacks_hz, capture.py_spy_pid
            )
        }
    interval_s = settings.lookback.lookback_interval_s
    gpu = GpuCollector(max_age_s=1.5 * interval_s)
    tf_memory = TFMemoryCollector(max_age_s=1.5 * interval_s)
    sampler = build_sampler(settings, gpu, tf_memory)
    annotator = grafana_annotator(settings.grafana, settings.report.public_url)
    registry = CollectorRegistry()
    captures = CaptureMetrics(registry, settings.capture.target_names)
    analysis = settings.analysis
    analyzer = XprofAnalyzer(
        timeout_s=settings.bounds.analysis_timeout_s,
        python=analysis.python,
        max_memory_bytes=lambda: analysis_memory_limit(analysis),
        workers=WarmWorkers(
            str(analysis.python) if analysis.python else None,
            max_jobs=analysis.worker_max_jobs,
            recycle_bytes=analysis.worker_recycle_bytes,
            idle_s=analysis.worker_idle_s,
        ),
    )
    lifecycle.closing(analyzer.close)
    controller = CaptureController(
        settings.capture,
        settings.bounds,
        store,
        capturers,
        analyzer,
        lead_up=LeadUpRecorder(settings.lookback, sampler),  # nothing while it has no source
        on_finished=[captures.observe] + ([annotator.on_finished] if annotator else []),
    )
    service = Service(
        settings,
        store,
        controller,
        annotator=annotator,
        sampler=sampler,
        continuous=continuous,
        mirror=mirror,
        lifecycle=lifecycle,
    )
    for plugin in plugins():  # every trigger/ module's PLUGIN, in TriggerKind's order
        group = group_of(settings, plugin.settings)  # the one group it reads
        built = plugin.build(TriggerParts(group, controller, store, sampler, lifecycle))
        if built is not None:
            service.triggers.add(plugin, built)
    registration = settings.registration
    if registration.url or (registration.register_in_bucket and bucket is not None):
        from profiler_service.registration import HubRegistration, sidecar_record

        service.registration = HubRegistration(
            registration,
            sidecar_record(settings),
            settings.server.hub_token,
            bucket if registration.register_in_bucket else None,
        )
    service.metrics = ServiceMetrics(
        controller,
        store,
        registry,
        captures,
        triggers=service.triggers.all(),
        annotation_counts=annotator.counts if annotator is not None else None,
        sampler=sampler,
        gpu=gpu,
        tf_memory=tf_memory,
        uploads=mirror,
        loops=service.lifecycle.loop_health,
    )
    return service


MIN_ANALYSIS_MEMORY = 256 * 2**20


def analysis_memory_limit(settings: AnalysisSettings) -> int:
    """PROFILER_ANALYSIS_MAX_MEMORY_BYTES, else 3/4 of what this process's cgroup limit (else
    the host's memory) leaves beside this process: the training job itself, for the agent."""
    if settings.max_memory_bytes:
        return settings.max_memory_bytes
    left = memory_limit_bytes() - psutil.Process().memory_info().rss
    return max(MIN_ANALYSIS_MEMORY, left * 3 // 4)


def build_sampler(
    settings: Settings, gpu: GpuCollector, tf_memory: TFMemoryCollector
) -> Sampler | None:
    """The look-back sources each mode can read (lookback/sources.py has the table)."""
    lookback, capacity = settings.lookback, settings.watch.capacity_bytes
    if lookback.lookback_s <= 0:
        return None
    if any(t.kind is TargetKind.IN_PROCESS for t in settings.capture.targets):
        sources: list[Source] = [
            StepSource(),
            ProcessMemorySource(limit_bytes=capacity),
            ProcessCpuSource(),
            TFMemorySource(tf_memory, gpu),
            GpuSource(gpu, pid=os.getpid),
        ]
    else:
        watched = WatchedProcess(lookback.watch_process) if lookback.watch_process else None
        sources = [GpuSource(gpu, pid=watched)]
        if watched is not None:
            sources[:0] = [
                ProcessMemorySource(watched, name="proc", limit_bytes=capacity),
                ProcessCpuSource(watched, name="proc"),
            ]
        else:  # not for the notes: said only when nothing at all was read
            sources.append(NotRead((), UNWATCHED_HINT))
        if lookback.job_metrics_url:
            timeout_s = min(1.0, lookback.lookback_interval_s / 2)
            sources.insert(0, JobMetricsSource(lookback.job_metrics_url, timeout_s))
        else:
            sources.insert(0, NotRead(("step_time_ms",), SIDECAR_STEPS_HINT))
    ring = SampleRing(lookback.lookback_s, lookback.lookback_interval_s)
    return Sampler(ring, sources, lookback.lookback_interval_s)
