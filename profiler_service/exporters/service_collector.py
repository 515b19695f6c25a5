"""The service's state at scrape time: captures in flight, the store, each target's latest analysis.

Everything comes from the controller's memory and the SQLite index in two small queries; no
`snapshot.json` is read. A target's latest summary is parsed once, when its newest ready snapshot
changes, and kept until the next one.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from profiler_service.analysis.renamed_fields import share_of
from profiler_service.capture.controller import CaptureController
from profiler_service.models import SnapshotStatus
from profiler_service.store import SnapshotStore
from profiler_service.store.baselines import target_key

__all__ = ["ServiceCollector", "read_analysis"]


@dataclass(frozen=True)
class LatestAnalysis:
    """The numbers exported from one target's newest ready snapshot."""

    snapshot_id: str
    created_s: float
    bottleneck: str
    step_time_s: float | None
    input_share: float | None
    device_idle_share: float | None
    findings: Mapping[tuple[str, str], int]  # (rule, severity) -> count
    host_busy_s: Mapping[str, float] = field(default_factory=dict)  # multi-worker: per host
    gpu_busy: Mapping[str, float] = field(default_factory=dict)  # per GPU, 0-1 of the capture
    cost_ratio: float | None = None  # step time while traced / before (capture.cost)


Latest = list[tuple[str, LatestAnalysis]]  # (target, its newest snapshot's numbers), sorted


def _path(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _number(*candidates: tuple[Any, float]) -> float | None:
    """The first candidate that is a number, times its scale (100 -> 1 for percentages)."""
    for value, scale in candidates:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value) * scale
    return None


def _device_idle(summary: Mapping[str, Any], gpu_idle: float | None) -> float | None:
    """XProf's device idle share, else the GPUs' own; none on a CPU-only capture, where XProf
    still writes 0 % (no device: no series, not a device that never idled)."""
    xprof = _number(
        (_path(summary, "utilisation", "device_idle_share"), 1.0),
        (_path(summary, "utilisation", "device_idle_pct"), 0.01),  # before 0.2.0
    )
    if _path(summary, "utilisation", "hardware_type") == "CPU_ONLY":
        return gpu_idle
    return xprof if xprof is not None else gpu_idle


def read_analysis(snapshot_id: str, created_at: str, doc: str) -> LatestAnalysis:
    """Pick the exported numbers out of a snapshot document, tolerating older and newer shapes.

    The summary is still growing (issue 3), so each number is looked up where the current
    `Summary` keeps it and where the first one did; a missing number is simply not exported.
    """
    data = json.loads(doc)
    summary = data.get("summary") or {}
    findings: Counter[tuple[str, str]] = Counter()
    for finding in data.get("findings") or []:
        if isinstance(finding, Mapping) and finding.get("rule"):
            findings[(str(finding["rule"]), str(finding.get("severity") or "unknown"))] += 1
    step_ms = _number(
        (_path(summary, "step_time", "avg_ms"), 1.0), (summary.get("step_time_ms_avg"), 1.0)
    )
    # Each GPU's shares, in either spelling (`_pct`, 0-100, before 0.2.0).
    gpus = [
        d
        for d in _path(summary, "gpu", "devices") or []
        if isinstance(d, Mapping)
        and _number((share_of(d, "busy_share", "busy_pct"), 1.0)) is not None
    ]
    active = [
        idle
        for d in gpus
        if _path(d, "kernels", "count")
        and (idle := share_of(d, "idle_share", "idle_pct")) is not None
    ]
    # XProf gives no idle share for GPUs: the GPUs' own planes do (the ones that ran kernels).
    gpu_idle = sum(active) / len(active) if active else None
    return LatestAnalysis(
        snapshot_id=snapshot_id,
        created_s=datetime.fromisoformat(created_at).timestamp(),
        bottleneck=str(summary.get("bottleneck") or "unknown"),
        step_time_s=None if step_ms is None else step_ms / 1000.0,
        input_share=_number(
            (_path(summary, "input_pipeline", "input_share"), 1.0),
            (_path(summary, "input_pipeline", "input_share_pct"), 0.01),  # before 0.2.0
            (summary.get("input_share_pct"), 0.01),
        ),
        device_idle_share=_device_idle(summary, gpu_idle),
        findings=dict(findings),
        host_busy_s={
            str(h["host"]): h["busy_ms_avg"] / 1000.0
            for h in summary.get("per_host") or []
            if isinstance(h, Mapping) and _number((h.get("busy_ms_avg"), 1.0)) is not None
        },
        gpu_busy={str(d.get("device")): share_of(d, "busy_share", "busy_pct") for d in gpus},
        cost_ratio=_number((_path(data, "capture", "cost", "ratio"), 1.0)),
    )


class UploadQueue(Protocol):
    """The bucket mirror's queue, as the metrics read it (store/mirror_sync.py's MirrorSync)."""

    upload_failures_total: int

    def pending_count(self) -> int: ...


class ServiceCollector:
    """Captures in progress, snapshots and bytes in the store, latest analysis per target."""

    def __init__(
        self,
        controller: CaptureController,
        store: SnapshotStore,
        uploads: UploadQueue | None = None,
    ):
        self.controller = controller
        self.store = store
        self.uploads = uploads
        self._lock = threading.Lock()
        self._latest: dict[str, LatestAnalysis] = {}
        self._baselines: dict[str, LatestAnalysis] = {}

    def collect(self) -> Iterator[Metric]:
        yield from self._in_progress()
        yield from self._store()
        yield from self._latest_analysis()

    def _in_progress(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "profiler_capture_in_progress",
            "1 while a capture (or its analysis) of the target runs, else 0.",
            labels=["target"],
        )
        busy = Counter(s.target for s in self.controller.in_flight())
        for target in self.controller.capture.targets:
            gauge.add_metric([target.name], busy.pop(target.name, 0))
        for name, n in busy.items():
            gauge.add_metric([name], n)
        yield gauge

    def _store(self) -> Iterator[Metric]:
        snapshots = GaugeMetricFamily(
            "profiler_store_snapshots",
            "Snapshots in the store by status (from its index).",
            labels=["status"],
        )
        size = GaugeMetricFamily(
            "profiler_store_size_bytes",
            "Bytes of snapshot files in the store by status.",
            labels=["status"],
            unit="bytes",
        )
        totals = {s.value: (0, 0, 0) for s in SnapshotStatus}
        for status, count, size_bytes, pinned in self.store.totals.totals_by_status():
            totals[status] = (count, size_bytes, pinned)
        for status, (count, size_bytes, _) in totals.items():
            snapshots.add_metric([status], count)
            size.add_metric([status], size_bytes)
        yield snapshots
        yield size
        yield GaugeMetricFamily(
            "profiler_store_pinned_snapshots",
            "Pinned snapshots (baselines retention never evicts).",
            value=sum(p for _, _, p in totals.values()),
        )
        sync = self.uploads
        if sync is not None:  # only with PROFILER_STORE_URL
            yield GaugeMetricFamily(
                "profiler_store_upload_pending",
                "Finished snapshots not yet copied to the shared object store.",
                value=sync.pending_count(),
            )
            yield CounterMetricFamily(
                "profiler_store_upload_failures",
                "Failed attempts to copy a snapshot to (or delete it from) the object store.",
                value=sync.upload_failures_total,
            )

    def _latest_for_targets(self) -> dict[str, LatestAnalysis]:
        rows = self.store.totals.latest_ready()
        with self._lock:
            for target, (snapshot_id, created_at) in rows.items():
                cached = self._latest.get(target)
                if cached is None or cached.snapshot_id != snapshot_id:
                    doc = self.store.totals.doc(snapshot_id)
                    if doc is not None:
                        self._latest[target] = read_analysis(snapshot_id, created_at, doc)
            for gone in set(self._latest) - set(rows):
                del self._latest[gone]
            return dict(self._latest)

    def _latest_analysis(self) -> Iterator[Metric]:
        latest = sorted(self._latest_for_targets().items())
        yield _latest_info(latest)
        yield _per_target(
            latest,
            "profiler_latest_analysis_timestamp_seconds",
            "When the target's newest ready snapshot was taken (Unix time).",
            "seconds",
            lambda a: a.created_s,
        )
        yield _per_target(
            latest,
            "profiler_latest_step_time_seconds",
            "Average step time in the target's newest ready snapshot.",
            "seconds",
            lambda a: a.step_time_s,
        )
        yield _per_target(
            latest,
            "profiler_latest_input_bound_ratio",
            "Share (0-1) of step time spent waiting for input in the newest ready snapshot.",
            "ratio",
            lambda a: a.input_share,
        )
        yield _per_target(
            latest,
            "profiler_latest_device_idle_ratio",
            "Share (0-1) of time the device was idle in the newest ready snapshot; absent where "
            "it ran on the CPU alone (no device).",
            "ratio",
            lambda a: a.device_idle_share,
        )
        yield _latest_findings(latest)
        yield _latest_host_busy(latest)
        yield _latest_gpu_busy(latest)
        yield _per_target(
            latest,
            "profiler_capture_cost_ratio",
            "What the newest ready snapshot's capture cost the job: its step time while traced "
            "over its step time just before (1.05 = 5% slower); absent where the job reports no "
            "step timings.",
            "ratio",
            lambda a: a.cost_ratio,
        )
        yield self._regression(latest)

    def _regression(self, latest: Latest) -> Metric:
        regression = GaugeMetricFamily(
            "profiler_latest_step_time_regression_ratio",
            "Newest ready snapshot's step time over the target's baseline (1.1 = 10% slower).",
            labels=["target", "baseline"],
            unit="ratio",
        )
        for target, a in latest:
            base = self._baseline_of(target)
            if base is not None and base.step_time_s and a.step_time_s is not None:
                regression.add_metric([target, base.snapshot_id], a.step_time_s / base.step_time_s)
        return regression

    def _baseline_of(self, target: str) -> LatestAnalysis | None:
        """The target's baseline, parsed once per baseline id (see store/baselines.py)."""
        snapshot_id = self.store.baselines.get(target_key(target))
        if snapshot_id is None:
            return None
        with self._lock:
            cached = self._baselines.get(snapshot_id)
        if cached is None:
            doc = self.store.totals.doc(snapshot_id)
            if doc is None:
                return None
            created_at = json.loads(doc).get("created_at") or "1970-01-01T00:00:00+00:00"
            cached = read_analysis(snapshot_id, created_at, doc)
            with self._lock:
                self._baselines[snapshot_id] = cached
        return cached


def _per_target(
    latest: Latest,
    name: str,
    documentation: str,
    unit: str,
    value: Callable[[LatestAnalysis], float | None],
) -> Metric:
    """One gauge a target, where its snapshot has the value."""
    family = GaugeMetricFamily(name, documentation, labels=["target"], unit=unit)
    for target, a in latest:
        v = value(a)
        if v is not None:
            family.add_metric([target], v)
    return family


def _latest_info(latest: Latest) -> Metric:
    info = InfoMetricFamily(
        "profiler_latest_analysis",
        "The target's newest ready snapshot and XProf's bottleneck verdict for it.",
        labels=["target"],
    )
    for target, a in latest:
        info.add_metric([target], {"snapshot_id": a.snapshot_id, "bottleneck": a.bottleneck})
    return info


def _latest_findings(latest: Latest) -> Metric:
    findings = GaugeMetricFamily(
        "profiler_latest_findings",
        "Findings in the target's newest ready snapshot, by rule and severity.",
        labels=["target", "rule", "severity"],
    )
    for target, a in latest:
        for (rule, severity), n in sorted(a.findings.items()):
            findings.add_metric([target, rule, severity], n)
    return findings


def _latest_host_busy(latest: Latest) -> Metric:
    return _per_part(
        latest,
        GaugeMetricFamily(
            "profiler_latest_host_busy_seconds",
            "Per worker of a multi-worker snapshot: step time minus waiting on the others; "
            "the largest is the straggler.",
            labels=["target", "host"],
            unit="seconds",
        ),
        lambda a: a.host_busy_s,
    )


def _latest_gpu_busy(latest: Latest) -> Metric:
    return _per_part(
        latest,
        GaugeMetricFamily(
            "profiler_latest_gpu_busy_ratio",
            "Per GPU: share (0-1) of the newest ready snapshot's capture it ran kernels or "
            "copies (read from its own plane): what DCGM's GPU_UTIL means, over the capture.",
            labels=["target", "gpu"],
            unit="ratio",
        ),
        lambda a: a.gpu_busy,
    )


def _per_part(latest: Latest, family: GaugeMetricFamily, values: Callable) -> Metric:
    """`family` with one sample per target and part (a worker, a GPU), parts in order."""
    for target, a in latest:
        for part, value in sorted(values(a).items()):
            family.add_metric([target, part], value)
    return family
