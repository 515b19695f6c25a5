"""`GET /metrics`: one registry per service, the collectors in it, and the exposition.

    captures = CaptureMetrics(registry, targets)      # handed to the controller's on_finished
    metrics = ServiceMetrics(controller, store, registry, captures, ...)
    body, content_type = metrics.render(accept)    # OpenMetrics when the scraper asks for it

Events (a capture finished) are counted by instrumented metrics fed from the controller's
`on_finished` callbacks; state (GPUs, host, store, latest analysis) is read by collectors at scrape
time. The in-process collectors (training steps, TensorFlow device memory) are registered only
when the service captures its own process, so the sidecar never touches TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from profiler_service import __version__
from profiler_service.capture.controller import CaptureController
from profiler_service.exporters.annotation_collector import AnnotationCollector
from profiler_service.exporters.gpu_collector import GpuCollector
from profiler_service.exporters.lookback_collector import LookbackCollector
from profiler_service.exporters.loop_collector import LoopCollector
from profiler_service.exporters.service_collector import ServiceCollector, UploadQueue
from profiler_service.exporters.step_collector import StepCollector
from profiler_service.exporters.system_collector import SystemCollector
from profiler_service.exporters.tf_collector import TFMemoryCollector
from profiler_service.lifecycle import LoopHealth
from profiler_service.lookback.sampler import Sampler
from profiler_service.models import Snapshot, SnapshotStatus, TriggerKind
from profiler_service.probes.steps import STEP_STATS, StepStats
from profiler_service.store import SnapshotStore
from profiler_service.targets import TargetKind
from profiler_service.tenancy import EVERYWHERE, Reach
from profiler_service.trigger.plugin import BuiltTrigger

__all__ = ["CaptureMetrics", "ServiceMetrics", "WithoutCreated"]

CAPTURE_BUCKETS_S = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
ANALYSIS_BUCKETS_S = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
OUTCOMES = ("ready", "failed")


class CaptureMetrics:
    """Counts finished captures and times their two halves; `observe` is an on_finished callback."""

    def __init__(self, registry: CollectorRegistry, targets: list[str] = ()):
        Info(
            "profiler_build",
            "The release this service runs (CHANGELOG.md): what a dashboard joins to see an "
            "upgrade.",
            registry=registry,
        ).info({"version": __version__})
        self.captures = Counter(
            "profiler_captures",
            "Finished captures by target, trigger and outcome (ready or failed); OpenMetrics "
            "exemplars carry the snapshot_id.",
            ["target", "trigger", "outcome"],
            registry=registry,
        )
        self.errors = Counter(
            "profiler_capture_errors",
            "Failed captures by target and error code (docs/reference/errors-and-outcomes.md).",
            ["target", "error"],
            registry=registry,
        )
        self.capture_duration = Histogram(
            "profiler_capture_duration_seconds",
            "From the start of tracing to the capture file being on disk (or the failure).",
            ["target"],
            buckets=CAPTURE_BUCKETS_S,
            registry=registry,
        )
        self.analysis_duration = Histogram(
            "profiler_analysis_duration_seconds",
            "From the capture file being on disk to the snapshot being ready (or failed).",
            ["target"],
            buckets=ANALYSIS_BUCKETS_S,
            registry=registry,
        )
        self.fixes = Counter(
            "profiler_fix_verified",
            "Findings of a job's earlier snapshot checked against its next one, by rule and "
            "status (resolved, persists, regressed, new); exemplars carry the snapshot_id.",
            ["target", "rule", "status"],
            registry=registry,
        )
        self.fix_saving = Gauge(
            "profiler_fix_saving_ratio",
            "The last checked prediction of each rule (where the step's change was that "
            "finding's alone): the share of step time the fix saved (measured) against what the "
            "finding predicted (predicted, and its range: predicted_low, predicted_high).",
            ["target", "rule", "kind"],
            registry=registry,
        )
        self.predictions = Counter(
            "profiler_fix_predictions",
            "Checked predictions by where the measured saving fell against the predicted range "
            "(within, below, above): how well the findings' impact holds on this fleet.",
            ["target", "rule", "agreement"],
            registry=registry,
        )
        # Series start at 0, so increase() sees a target's first capture.
        for target in targets:
            for trigger in TriggerKind:
                for outcome in OUTCOMES:
                    self.captures.labels(target, trigger.value, outcome)
            self.capture_duration.labels(target)
            self.analysis_duration.labels(target)

    def observe(self, snapshot: Snapshot) -> None:
        exemplar = {"snapshot_id": snapshot.id}
        outcome = "ready" if snapshot.status is SnapshotStatus.READY else "failed"
        self.captures.labels(snapshot.target, snapshot.trigger.kind.value, outcome).inc(
            exemplar=exemplar
        )
        if outcome == "failed":
            code = snapshot.error.code if snapshot.error else "unknown"
            self.errors.labels(snapshot.target, code).inc()
        for checked in snapshot.verification:
            self.fixes.labels(snapshot.target, checked.rule, checked.status.value).inc(
                exemplar=exemplar
            )
            if checked.prediction is None:
                continue
            self.predictions.labels(snapshot.target, checked.rule, checked.prediction.value).inc(
                exemplar=exemplar
            )
            low, high = checked.predicted_saving_range or (None, None)
            for kind, share in (
                ("measured", checked.measured_saving_share),
                ("predicted", checked.predicted_saving_share),
                ("predicted_low", low),
                ("predicted_high", high),
            ):
                self.fix_saving.labels(snapshot.target, checked.rule, kind).set(share or 0.0)
        started, traced, finished = (
            snapshot.capture_started_at,
            snapshot.capture_finished_at,
            snapshot.finished_at,
        )
        capture_end = traced or finished
        if started is not None and capture_end is not None:
            self.capture_duration.labels(snapshot.target).observe(
                max(0.0, (capture_end - started).total_seconds()), exemplar=exemplar
            )
        if traced is not None and finished is not None:
            self.analysis_duration.labels(snapshot.target).observe(
                max(0.0, (finished - traced).total_seconds()), exemplar=exemplar
            )


class ServiceMetrics:
    """Every metric the service exports, in `registry` (one per service): `captures` was
    registered in it and handed to the controller first, which calls it for every capture."""

    def __init__(
        self,
        controller: CaptureController,
        store: SnapshotStore,
        registry: CollectorRegistry,
        captures: CaptureMetrics,
        *,
        triggers: Iterable[BuiltTrigger] = (),
        annotation_counts: Callable[[], dict[str, int]] | None = None,
        sampler: Sampler | None = None,
        gpu: GpuCollector | None = None,
        tf_memory: TFMemoryCollector | None = None,
        steps: StepStats = STEP_STATS,
        uploads: UploadQueue | None = None,
        loops: Callable[[], list[LoopHealth]] = list,
    ):
        self.registry = registry
        self.captures = captures  # observes finished captures: the controller's on_finished
        self.gpu = gpu or GpuCollector()
        collectors = [
            ServiceCollector(controller, store, uploads),
            *triggers,  # each brings its own counters (trigger/plugin.py)
            AnnotationCollector(annotation_counts),
            SystemCollector(),
            self.gpu,
            ProcessCollector(registry=None),
            LoopCollector(loops),
        ]
        self.in_process = any(t.kind is TargetKind.IN_PROCESS for t in controller.capture.targets)
        if self.in_process:
            collectors += [StepCollector(steps), tf_memory or TFMemoryCollector()]
        if sampler is not None:
            collectors.append(LookbackCollector(sampler))
        for collector in collectors:
            self.registry.register(collector)

    def render(self, accept: str | None, reach: Reach = EVERYWHERE) -> tuple[bytes, str]:
        """The exposition and its content type: OpenMetrics 1.0 when `accept` asks for it.
        `reach` is the hub's (its tenants); a sidecar's metrics are its own job's."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(WithoutCreated(self.registry)), content_type  # type: ignore[arg-type]


class WithoutCreated:
    """A registry's families less the `_created` series prometheus_client's counters and
    histograms add (one more series each, the time the process made them: nothing to alert
    on, and Prometheus reads a counter's resets from the counter itself). Filtered at
    exposition, not with `disable_created_metrics()`, which would change every registry of the
    process: the agent's is the training job's, whose own metrics are not ours to change."""

    _TYPES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self.registry.collect():
            if metric.type in self._TYPES:
                created = f"{metric.name}_created"
                metric.samples = [s for s in metric.samples if s.name != created]
            yield metric
