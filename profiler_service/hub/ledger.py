"""The fleet ledger: every job's GPU-hours over a window, held, busy and idle, the idle hours by
cause, what the findings' fixes would give back, and what it all costs.

Prometheus counts the hours (gpu_hours.py); the captures explain them. Each job's hours are cut
into buckets (`hub_ledger_bucket_s`); a bucket's idle hours are split by the idle causes of the
job's capture nearest to it (analysis/gpu_waste.py), and its recoverable hours are its held
hours x that capture's top predicted saving. A bucket no capture lies within
`hub_ledger_capture_horizon_s` of is `no_capture`: every idle hour goes to a cause or to it.
A pod belongs to the job its snapshots name (their `workload`), else to its name less the
suffixes Kubernetes controllers add. Without Prometheus the ledger is the captures' shares alone,
and says so.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, Field

from profiler_service.analysis.gpu_waste import CaptureWaste, IdleCause
from profiler_service.config import LedgerSettings
from profiler_service.durations import format_window
from profiler_service.hub.gpu_hours import (
    GpuHours,
    GpuHoursUnavailable,
    PodGpuHours,
    query_gpu_hours,
)
from profiler_service.hub.index.fleet_queries import FleetRow
from profiler_service.tenancy import Reach

__all__ = [
    "JobLedger",
    "Ledger",
    "LedgerTotals",
    "TopFinding",
    "build_ledger",
    "job_of_pod",
    "price_of",
]

CAUSES = [c.value for c in IdleCause]

# Kubernetes controllers' pod name suffixes: a Job's or ReplicaSet's 5 random characters (no
# vowels), then a Deployment's pod-template hash; else a StatefulSet's ordinal.
_RANDOM = "[bcdfghjklmnpqrstvwxz2456789]"
_RANDOM_SUFFIX = re.compile(f"-{_RANDOM}{{5}}$")
_TEMPLATE_HASH = re.compile(f"-{_RANDOM}{{6,10}}$")
_ORDINAL = re.compile(r"-\d+$")


def job_of_pod(pod: str) -> str:
    """`trainer-7d9f8b6c5d-x2x4z` -> `trainer`, `train-0042-k7q2p` -> `train-0042`, `bert-0`
    -> `bert`. An indexed Job's or a JobSet's pods keep their indexes (`train-3-k7q2p` ->
    `train-3`): their sidecars' `workload` names the job (the hub reads it from their
    snapshots)."""
    name = _RANDOM_SUFFIX.sub("", pod, count=1)
    after = _TEMPLATE_HASH if name != pod else _ORDINAL
    return after.sub("", name, count=1) or pod


def price_of(model: str | None, prices: dict[str, float]) -> float | None:
    """The price of a GPU-hour of `model`: the longest key its name contains, else `*`."""
    if model:
        matches = [k for k in prices if k != "*" and k.lower() in model.lower()]
        if matches:
            return prices[max(matches, key=len)]
    return prices.get("*")


class TopFinding(BaseModel):
    rule: str
    severity: str | None = None
    title: str | None = None
    saving_share: float
    saving_range: tuple[float, float] | None = None  # its least and most
    snapshot_id: str
    link: str


class LedgerTotals(BaseModel):
    """Sums over jobs: hours are None where no Prometheus counted them."""

    jobs: int = 0
    gpu_hours: float | None = None
    busy_gpu_hours: float | None = None
    idle_gpu_hours: float | None = None
    idle_by_cause: dict[str, float] = Field(default_factory=dict)
    recoverable_gpu_hours: float | None = None
    # The least and the most recoverable, from each fix's range (summed as such).
    recoverable_gpu_hours_range: tuple[float, float] | None = None
    cost: float | None = None  # of the held hours, where a price applies
    idle_cost: float | None = None
    recoverable_cost: float | None = None
    recoverable_cost_range: tuple[float, float] | None = None


class JobLedger(LedgerTotals):
    namespace: str | None
    job: str
    pods: list[str] = Field(default_factory=list)
    gpus: int = 0  # the most held at once (or traced in a capture, without Prometheus)
    gpu_model: str | None = None
    price_per_gpu_hour: float | None = None
    idle_share: float | None = None  # of held hours (or of the captures' time)
    idle_share_by_cause: dict[str, float] = Field(default_factory=dict)
    recoverable_share: float | None = None
    captures: int = 0  # with a GPU trace, in the window or within the horizon of it
    top_finding: TopFinding | None = None


class NamespaceLedger(LedgerTotals):
    namespace: str | None


class Ledger(BaseModel):
    window: str
    start: float  # unix seconds: the window is (start, end]
    end: float
    source: str  # prometheus: hours counted there; captures: shares from the captures alone
    currency: str | None = None  # of every cost (hub_gpu_hour_currency); None: no prices
    notes: list[str] = Field(default_factory=list)
    jobs: list[JobLedger] = Field(default_factory=list)  # most recoverable first
    namespaces: list[NamespaceLedger] = Field(default_factory=list)
    totals: LedgerTotals = Field(default_factory=LedgerTotals)

    def within(self, reach: Reach) -> Ledger:
        """The jobs of the namespaces `reach` allows, and the sums over them."""
        if reach.everywhere:
            return self
        jobs = reach.keep(self.jobs, lambda j: j.namespace)
        return self.model_copy(
            update={"jobs": jobs, "namespaces": _by_namespace(jobs), "totals": _sum(jobs)}
        )


@dataclass
class _Capture:
    at: float
    row: FleetRow
    waste: CaptureWaste


@dataclass
class _Job:
    namespace: str | None
    name: str
    pods: list[PodGpuHours] = field(default_factory=list)
    captures: list[_Capture] = field(default_factory=list)


def build_ledger(
    rows: Iterable[FleetRow],
    settings: LedgerSettings,
    *,
    window_s: float,
    end: float,
    link: Callable[[str], str] = lambda i: f"/profiles/{i}/report",
    gpu_hours: Callable[[int, int, int], GpuHours] | None = None,
) -> Ledger:
    """`rows`: the index's ready snapshots since `end - window_s - horizon`; `gpu_hours`:
    (start, end, bucket_s) -> pods (default: query_gpu_hours on `settings`)."""
    bucket = int(settings.ledger_bucket_s)
    res = settings.ledger_resolution_s
    end_i = int(end // res * res)
    buckets = max(1, round(window_s / bucket))
    start_i = end_i - buckets * bucket
    ledger = Ledger(window=format_window(window_s), start=start_i, end=end_i, source="prometheus")
    jobs: dict[tuple[str | None, str], _Job] = {}
    pod_jobs: dict[tuple[str | None, str], str] = {}
    for row in rows:
        name = row.workload or (job_of_pod(row.pod) if row.pod else row.target)
        if row.pod:
            pod_jobs[(row.namespace, row.pod)] = name
        if row.gpu_waste:
            job = jobs.setdefault((row.namespace, name), _Job(row.namespace, name))
            waste = CaptureWaste.model_validate_json(row.gpu_waste)
            job.captures.append(_Capture(_unix(row.created_at), row, waste))
    ask = gpu_hours or (lambda s, e, b: query_gpu_hours(settings, s, e, b))
    try:
        counted = ask(start_i, end_i, bucket)
        pods = counted.pods
        ledger.notes.append(counted.method)
    except GpuHoursUnavailable as exc:
        ledger.source = "captures"
        ledger.notes.append(
            f"GPU-hours not counted: {exc}. The shares below come from the captures alone."
        )
        pods = []
    for pod in pods:
        name = pod_jobs.get((pod.namespace, pod.pod)) or job_of_pod(pod.pod)
        jobs.setdefault((pod.namespace, name), _Job(pod.namespace, name)).pods.append(pod)
    prices = settings.gpu_hour_prices
    horizon = settings.ledger_capture_horizon_s
    for job in jobs.values():
        job.captures.sort(key=lambda c: c.at)
        if ledger.source == "prometheus":
            if not job.pods:
                continue  # captured, but Prometheus counted no GPU of it: noted below
            entry = _counted(job, start_i, end_i, bucket, horizon, link)
        else:
            entry = _from_captures(job, start_i, end_i, link)
            if entry is None:
                continue
        entry.price_per_gpu_hour = price_of(entry.gpu_model, prices)
        _cost(entry)
        ledger.jobs.append(entry)
    uncounted = sorted(
        f"{ns}/{name}" if ns else name
        for (ns, name), job in jobs.items()
        if ledger.source == "prometheus" and not job.pods and _in_window(job, start_i, end_i)
    )
    if uncounted:
        ledger.notes.append(
            f"{len(uncounted)} jobs with GPU captures in the window held no GPU Prometheus "
            f"counted (its labels {settings.gpu_namespace_label}/"
            f"{settings.gpu_pod_label} name none of their pods?): "
            + ", ".join(uncounted[:5])
            + (" ..." if len(uncounted) > 5 else "")
        )
    if not prices and ledger.jobs:
        ledger.notes.append("No GPU-hour prices are set (hub_gpu_hour_prices): no costs.")
    ledger.currency = settings.gpu_hour_currency if prices else None
    ledger.jobs.sort(
        key=lambda j: (-(j.recoverable_gpu_hours or 0), -(j.recoverable_share or 0), j.job)
    )
    ledger.namespaces = _by_namespace(ledger.jobs)
    ledger.totals = _sum(ledger.jobs)
    return ledger


def _counted(
    job: _Job, start: int, end: int, bucket: int, horizon: float, link: Callable[[str], str]
) -> JobLedger:
    held: dict[int, float] = {}
    busy: dict[int, float] = {}
    model_s: dict[str, float] = {}
    for pod in job.pods:
        for t, s in pod.held_s.items():
            if start < t <= end:
                held[t] = held.get(t, 0.0) + s
                busy[t] = busy.get(t, 0.0) + pod.busy_s.get(t, 0.0)
                if pod.model:
                    model_s[pod.model] = model_s.get(pod.model, 0.0) + s
    times = [c.at for c in job.captures]
    by_cause = dict.fromkeys(CAUSES, 0.0)
    recoverable = least = most = 0.0
    used: set[str] = set()
    for t, held_s in held.items():
        idle_s = max(held_s - busy[t], 0.0)
        capture = _nearest(job.captures, times, t - bucket / 2, horizon)
        if capture is None:
            by_cause[IdleCause.NO_CAPTURE] += idle_s
            continue
        used.add(capture.row.id)
        for cause, share in capture.waste.idle_split().items():
            by_cause[cause] += idle_s * share
        recoverable += held_s * capture.waste.saving_share
        low, high = capture.waste.saving_bounds
        least, most = least + held_s * low, most + held_s * high
    held_h, busy_h = sum(held.values()) / 3600, sum(busy.values()) / 3600
    idle_h = sum(by_cause.values()) / 3600
    entry = JobLedger(
        namespace=job.namespace,
        job=job.name,
        jobs=1,
        pods=sorted({p.pod for p in job.pods}),
        gpus=round(max(held.values(), default=0.0) / bucket),
        gpu_model=max(model_s, key=model_s.__getitem__) if model_s else _capture_model(job),
        gpu_hours=held_h,
        busy_gpu_hours=busy_h,
        idle_gpu_hours=idle_h,
        idle_by_cause={c: s / 3600 for c, s in by_cause.items() if s > 0},
        recoverable_gpu_hours=recoverable / 3600,
        recoverable_gpu_hours_range=(least / 3600, most / 3600),
        idle_share=idle_h / held_h if held_h else None,
        recoverable_share=recoverable / 3600 / held_h if held_h else None,
        captures=len(used),
    )
    entry.idle_share_by_cause = (
        {c: h / held_h for c, h in entry.idle_by_cause.items()} if held_h else {}
    )
    entry.top_finding = _top([c for c in job.captures if c.row.id in used], link)
    return entry


def _from_captures(job: _Job, start: int, end: int, link: Callable[[str], str]) -> JobLedger | None:
    """Without Prometheus: the mean of the job's captures in the window, as shares."""
    inside = [c for c in job.captures if start < c.at <= end]
    if not inside:
        return None
    n = len(inside)
    by_cause: dict[str, float] = {}
    for c in inside:
        for cause, share in c.waste.idle_split().items():
            by_cause[cause] = by_cause.get(cause, 0.0) + c.waste.idle_share * share / n
    return JobLedger(
        namespace=job.namespace,
        job=job.name,
        jobs=1,
        gpus=max(c.waste.gpus for c in inside),
        gpu_model=_capture_model(job),
        idle_share=sum(c.waste.idle_share for c in inside) / n,
        idle_share_by_cause=by_cause,
        recoverable_share=sum(c.waste.saving_share for c in inside) / n,
        captures=n,
        top_finding=_top(inside, link),
    )


def _nearest(
    captures: list[_Capture], times: list[float], at: float, horizon: float
) -> _Capture | None:
    i = bisect.bisect_left(times, at)
    near = [c for c in captures[max(i - 1, 0) : i + 1] if abs(c.at - at) <= horizon]
    return min(near, key=lambda c: abs(c.at - at)) if near else None


def _top(captures: list[_Capture], link: Callable[[str], str]) -> TopFinding | None:
    """The newest capture's fix-first finding (the captures are oldest first)."""
    for c in reversed(captures):
        w = c.waste
        if w.rule:
            return TopFinding(
                rule=w.rule,
                severity=w.severity,
                title=w.title,
                saving_share=w.saving_share,
                saving_range=w.saving_bounds,
                snapshot_id=c.row.id,
                link=link(c.row.id),
            )
    return None


def _capture_model(job: _Job) -> str | None:
    return next((c.waste.model for c in reversed(job.captures) if c.waste.model), None)


def _in_window(job: _Job, start: int, end: int) -> bool:
    return any(start < c.at <= end for c in job.captures)


def _cost(entry: JobLedger) -> None:
    price = entry.price_per_gpu_hour
    if price is None or entry.gpu_hours is None:
        return
    entry.cost = entry.gpu_hours * price
    entry.idle_cost = (entry.idle_gpu_hours or 0.0) * price
    entry.recoverable_cost = (entry.recoverable_gpu_hours or 0.0) * price
    if entry.recoverable_gpu_hours_range is not None:
        low, high = entry.recoverable_gpu_hours_range
        entry.recoverable_cost_range = (low * price, high * price)


_SUMMED = ("gpu_hours", "busy_gpu_hours", "idle_gpu_hours", "recoverable_gpu_hours", "cost",
           "idle_cost", "recoverable_cost")  # fmt: skip


def _sum(jobs: list[JobLedger]) -> LedgerTotals:
    totals = LedgerTotals(jobs=len(jobs))
    for name in _SUMMED:
        known = [getattr(j, name) for j in jobs if getattr(j, name) is not None]
        setattr(totals, name, sum(known) if known else None)
    for name in ("recoverable_gpu_hours_range", "recoverable_cost_range"):
        known = [getattr(j, name) for j in jobs if getattr(j, name) is not None]
        if known:
            setattr(totals, name, (sum(k[0] for k in known), sum(k[1] for k in known)))
    for job in jobs:
        for cause, hours in job.idle_by_cause.items():
            totals.idle_by_cause[cause] = totals.idle_by_cause.get(cause, 0.0) + hours
    return totals


def _by_namespace(jobs: list[JobLedger]) -> list[NamespaceLedger]:
    grouped: dict[str | None, list[JobLedger]] = {}
    for job in jobs:
        grouped.setdefault(job.namespace, []).append(job)
    out = [NamespaceLedger(namespace=ns, **_sum(its).model_dump()) for ns, its in grouped.items()]
    return sorted(out, key=lambda n: (-(n.recoverable_gpu_hours or 0), n.namespace or ""))


def _unix(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()
