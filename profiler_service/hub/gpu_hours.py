"""The GPU-hours each pod held and kept busy, per bucket of the ledger's window, from Prometheus.

Range queries over `hub_gpu_util_query` (one series per GPU while a pod holds it), evaluated at
every bucket's end, aggregated by namespace, pod and GPU model. First, in one pass over the raw
samples: each bucket's samples and their utilisation's sum, and the GPUs present at each end.

- held: the bucket's samples x the scrape interval. The interval is `hub_gpu_scrape_interval_s`
  where set; else it is read from the samples: a pod seen in three buckets or more filled at
  least one, and its fullest bucket holds bucket / interval samples per GPU. When every such pod
  shows the same interval (within `UNIFORM_SHARE`), that interval counts every pod's samples.
  When they differ, each such pod's samples count at its own interval (the median of the pods
  within `UNIFORM_SHARE` of it), and only the pods seen too briefly to show one are counted by
  a second query: per GPU, the `hub_ledger_resolution_s` intervals (raised to the longest
  scrape interval seen) holding a sample, a `present_over_time` subquery narrowed to those
  pods. Right whatever the intervals; the subquery over every GPU costs about five times the
  first pass (bench/bench_ledger.py), so it is never asked of the whole fleet unless no pod
  shows its interval.
- busy: held x the mean utilisation of the bucket's samples over `hub_gpu_util_max`.

Every range is shortened by 1 ms so that Prometheus 2's closed ranges and Prometheus 3's
left-open ones count the same samples and neighbouring buckets never share one.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from profiler_service.config import LedgerSettings

__all__ = [
    "GpuHours",
    "GpuHoursUnavailable",
    "PodGpuHours",
    "bucket_ends",
    "queries",
    "query_gpu_hours",
]

UNIFORM_SHARE = 0.05  # scrape intervals this close count as one
MIN_BUCKETS = 3  # a pod seen in this many buckets filled one of them


class GpuHoursUnavailable(Exception):
    """Prometheus could not say: the sentence says why (the ledger falls back to captures)."""


@dataclass
class PodGpuHours:
    namespace: str | None
    pod: str
    model: str | None
    held_s: dict[int, float] = field(default_factory=dict)  # bucket end (unix s) -> GPU-seconds
    busy_s: dict[int, float] = field(default_factory=dict)


@dataclass
class GpuHours:
    pods: list[PodGpuHours]
    method: str  # how held hours were counted, as the ledger's notes say it


Key = tuple[str, ...]


def bucket_ends(start: int, end: int, bucket_s: int) -> list[int]:
    """The buckets' ends, tiling (start, end]."""
    return list(range(start + bucket_s, end + 1, bucket_s))


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def _by(settings: LedgerSettings) -> str:
    labels = (
        settings.gpu_namespace_label,
        settings.gpu_pod_label,
        settings.gpu_model_label,
    )
    return f"sum by ({', '.join(labels)})"


def queries(settings: LedgerSettings, bucket_s: int) -> dict[str, str]:
    """The first pass's PromQL, by name: over the raw samples only."""
    q, by, bucket = settings.gpu_util_query, _by(settings), _ms(bucket_s - 0.001)
    return {
        "util_sum": f"{by} (sum_over_time({q}[{bucket}]))",
        "util_samples": f"{by} (count_over_time({q}[{bucket}]))",
        "gpus": f"{by.replace('sum by', 'count by')} ({q})",
    }


def presence_query(
    settings: LedgerSettings, bucket_s: int, resolution_s: float, pods: Iterable[str] = ()
) -> str:
    """Per GPU, the resolution intervals of each bucket that hold a sample; of `pods` only
    where given."""
    q, bucket = _narrowed(settings, sorted(set(pods))), _ms(bucket_s - 0.001)
    return (
        f"{_by(settings)} (count_over_time(present_over_time({q}[{_ms(resolution_s - 0.001)}])"
        f"[{bucket}:{_ms(resolution_s)}]))"
    )


def _narrowed(settings: LedgerSettings, pods: list[str]) -> str:
    """`hub_gpu_util_query` with a matcher keeping `pods` (all of them where none given)."""
    q = settings.gpu_util_query
    if not pods:
        return q
    regex = "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", pod) for pod in pods)
    text = regex.replace("\\", "\\\\").replace('"', '\\"')
    matcher = f'{settings.gpu_pod_label}=~"{text}"'
    if not q.endswith("}"):
        return f"{q}{{{matcher}}}"
    inside = q[q.index("{") + 1 : -1].strip().rstrip(",")
    return f"{q[: q.index('{')]}{{{inside + ', ' if inside else ''}{matcher}}}"


def query_gpu_hours(
    settings: LedgerSettings,
    start: int,
    end: int,
    bucket_s: int,
    client: httpx.Client | None = None,
    *,
    presence: bool = False,
) -> GpuHours:
    """Every pod's GPU-seconds held and busy per bucket of (start, end]; raises
    GpuHoursUnavailable with the reason when Prometheus cannot answer. `presence`: count held
    hours by intervals whatever the samples show."""
    url = settings.prometheus_url
    if not url:
        raise GpuHoursUnavailable("no Prometheus is configured (hub_prometheus_url)")
    window = {"start": str(start + bucket_s), "end": str(end), "step": f"{bucket_s}s"}
    http = client or httpx.Client(timeout=settings.prometheus_timeout_s)
    labels = (
        settings.gpu_namespace_label,
        settings.gpu_pod_label,
        settings.gpu_model_label,
    )
    try:
        asked = queries(settings, bucket_s)
        with ThreadPoolExecutor(len(asked)) as pool:
            results = pool.map(lambda q: _ask(http, url, q, window), asked.values())
            first = {
                name: {k: _values(v) for k, v in _by_key(result, labels).items()}
                for name, result in zip(asked, results, strict=True)
            }
        samples = first["util_samples"]
        intervals = _scrape_intervals(samples, first["gpus"], bucket_s)
        plan = _held_plan(settings, samples, intervals, presence)
        counted = {k: v for k, v in samples.items() if k in plan.interval}
        if plan.by_presence is not None:
            longest = max(intervals.values(), default=0.0)
            resolution = max(settings.ledger_resolution_s, math.ceil(longest))
            pods = sorted({k[1] for k in plan.by_presence})  # none: every GPU series
            held = _ask(http, url, presence_query(settings, bucket_s, resolution, pods), window)
            for key, points in _by_key(held, labels).items():
                if not plan.by_presence or key in plan.by_presence:
                    counted[key] = _values(points)
                    plan.interval[key] = resolution
            method = plan.method.format(resolution=resolution)
        else:
            method = plan.method
    finally:
        if client is None:
            http.close()
    return GpuHours(_pods(counted, plan.interval, samples, first["util_sum"], settings), method)


def _scrape_intervals(
    samples: dict[Key, dict[int, float]], gpus: dict[Key, dict[int, float]], bucket_s: int
) -> dict[Key, float]:
    """Each pod's scrape interval, where it was seen in MIN_BUCKETS buckets or more (so one of
    them was full): the bucket over its fullest bucket's samples per GPU."""
    found = {}
    for key, counts in samples.items():
        held_gpus = max(gpus.get(key, {}).values(), default=0.0)
        if len(counts) >= MIN_BUCKETS and held_gpus > 0:
            found[key] = bucket_s / (max(counts.values()) / held_gpus)
    return found


@dataclass
class _HeldPlan:
    """How held hours are counted: each pod's samples x `interval[pod]`; the pods of
    `by_presence` (empty: every one) by the presence query instead, where not None. `method`
    is the ledger's note, `{resolution}` left to fill where the presence query runs."""

    interval: dict[Key, float]
    by_presence: frozenset[Key] | None
    method: str


def _held_plan(
    settings: LedgerSettings,
    samples: dict[Key, dict[int, float]],
    intervals: dict[Key, float],
    presence: bool,
) -> _HeldPlan:
    """The scrape interval each pod's samples count at, and the pods left to the presence
    query."""
    if settings.gpu_scrape_interval_s is not None and not presence:
        interval = settings.gpu_scrape_interval_s
        return _HeldPlan(
            dict.fromkeys(samples, interval),
            None,
            f"held hours: samples x {interval:g} s (hub_gpu_scrape_interval_s)",
        )
    if intervals and not presence:
        typical = statistics.median(intervals.values())
        if all(abs(i - typical) <= UNIFORM_SHARE * typical for i in intervals.values()):
            why = f"samples x {typical:g} s, the scrape interval every GPU series showed"
            return _HeldPlan(dict.fromkeys(samples, typical), None, f"held hours: {why}")
        own = _grouped(intervals)
        shown = sorted({round(i) for i in intervals.values()})
        brief = frozenset(k for k in samples if k not in own and k[1])  # a pod's GPUs only
        method = (
            "held hours: samples x each pod's own scrape interval (scrape intervals differ: "
            f"{', '.join(f'{i} s' for i in shown[:5])})"
        )
        if brief:
            method += (
                f"; {len(brief)} pod{'s' if len(brief) > 1 else ''} seen in fewer than "
                f"{MIN_BUCKETS} buckets: "
                "{resolution:g} s intervals holding a sample"
            )
        return _HeldPlan(own, brief or None, method)
    return _HeldPlan({}, frozenset(), "held hours: {resolution:g} s intervals holding a sample")


def _grouped(intervals: dict[Key, float]) -> dict[Key, float]:
    """Each pod's interval as the median of its group: the intervals within UNIFORM_SHARE of
    the group's shortest (one scrape interval read a little apart from pod to pod)."""
    ordered = sorted(intervals.items(), key=lambda kv: kv[1])
    out: dict[Key, float] = {}
    group: list[tuple[Key, float]] = []
    for key, interval in [*ordered, (("",), math.inf)]:
        if group and interval > group[0][1] * (1 + UNIFORM_SHARE):
            typical = statistics.median(i for _, i in group)
            out.update(dict.fromkeys((k for k, _ in group), typical))
            group = []
        group.append((key, interval))
    return out


def _pods(
    counted: dict[Key, dict[int, float]],
    intervals: dict[Key, float],
    samples: dict[Key, dict[int, float]],
    sums: dict[Key, dict[int, float]],
    settings: LedgerSettings,
) -> list[PodGpuHours]:
    top = settings.gpu_util_max
    pods = []
    for key, values in counted.items():
        namespace, pod, model = key
        if not pod:
            continue  # a GPU no pod holds: not a job's
        found = PodGpuHours(namespace or None, pod, model or None)
        interval = intervals[key]
        pod_sums, pod_samples = sums.get(key, {}), samples.get(key, {})
        for t, count in values.items():
            held = count * interval
            n = pod_samples.get(t)
            mean = pod_sums.get(t, 0.0) / n if n else 0.0
            found.held_s[t] = held
            found.busy_s[t] = held * min(max(mean / top, 0.0), 1.0)
        pods.append(found)
    return pods


def _ask(http: httpx.Client, url: str, promql: str, window: dict[str, str]) -> list[dict]:
    endpoint = f"{url}/api/v1/query_range"
    try:
        response = http.post(endpoint, data={"query": promql, **window})
    except httpx.TimeoutException:
        raise GpuHoursUnavailable(f"Prometheus at {url} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise GpuHoursUnavailable(f"Prometheus at {url} unreachable: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        raise GpuHoursUnavailable(
            f"Prometheus at {url} answered HTTP {response.status_code}, not JSON"
        ) from None
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        raise GpuHoursUnavailable(f"Prometheus refused {promql}: {error or response.text[:200]}")
    return body["data"]["result"]


def _by_key(result: list[dict], labels: tuple[str, str, str]) -> dict[Key, Any]:
    return {tuple(r["metric"].get(name, "") for name in labels): r["values"] for r in result}


def _values(points: list[list[Any]]) -> dict[int, float]:
    out = {}
    for t, v in points:
        value = float(v)
        if math.isfinite(value):
            out[round(float(t))] = value
    return out
