"""The GPU-hours each pod held and kept busy, per bucket of the ledger's window, from Prometheus.

Range queries over `hub_gpu_util_query` (one series per GPU while a pod holds it), evaluated at
every bucket's end, aggregated by namespace, pod and GPU model. First, in one pass over the raw
samples: each bucket's samples and their utilisation's sum, and the GPUs present at each end.

- held: the bucket's samples x the scrape interval. The interval is `hub_gpu_scrape_interval_s`
  where set; else it is read from the samples: a pod seen in three buckets or more filled at
  least one, and its fullest bucket holds bucket / interval samples per GPU. When every such pod
  shows the same interval (within `UNIFORM_SHARE`), that interval counts every pod's samples.
  When they differ, a second query counts, per GPU, the `hub_ledger_resolution_s` intervals
  (raised to the longest scrape interval seen) holding a sample: a `present_over_time`
  subquery, right whatever the interval, about five times the cost (bench/bench_ledger.py).
- busy: held x the mean utilisation of the bucket's samples over `hub_gpu_util_max`.

Every range is shortened by 1 ms so that Prometheus 2's closed ranges and Prometheus 3's
left-open ones count the same samples and neighbouring buckets never share one.
"""

from __future__ import annotations

import math
import statistics
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


def presence_query(settings: LedgerSettings, bucket_s: int, resolution_s: float) -> str:
    """Per GPU, the resolution intervals of each bucket that hold a sample."""
    q, bucket = settings.gpu_util_query, _ms(bucket_s - 0.001)
    return (
        f"{_by(settings)} (count_over_time(present_over_time({q}[{_ms(resolution_s - 0.001)}])"
        f"[{bucket}:{_ms(resolution_s)}]))"
    )


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
        interval, method = _held_method(settings, intervals, presence)
        if interval is None:
            longest = max(intervals.values(), default=0.0)
            resolution = max(settings.ledger_resolution_s, math.ceil(longest))
            held = _ask(http, url, presence_query(settings, bucket_s, resolution), window)
            counted = {k: _values(v) for k, v in _by_key(held, labels).items()}
            interval, method = resolution, method.format(resolution=resolution)
        else:
            counted = samples
    finally:
        if client is None:
            http.close()
    return GpuHours(_pods(counted, interval, samples, first["util_sum"], settings), method)


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


def _held_method(
    settings: LedgerSettings, intervals: dict[Key, float], presence: bool
) -> tuple[float | None, str]:
    """The scrape interval to count held hours with, or None for the presence query (and the
    sentence with `{resolution}` left to fill)."""
    if settings.gpu_scrape_interval_s is not None and not presence:
        interval = settings.gpu_scrape_interval_s
        return interval, f"held hours: samples x {interval:g} s (hub_gpu_scrape_interval_s)"
    if intervals and not presence:
        typical = statistics.median(intervals.values())
        if all(abs(i - typical) <= UNIFORM_SHARE * typical for i in intervals.values()):
            return typical, (
                f"held hours: samples x {typical:g} s, the scrape interval every GPU series showed"
            )
    shown = sorted({round(i) for i in intervals.values()})
    why = f"scrape intervals differ ({', '.join(f'{i} s' for i in shown[:5])})" if shown else ""
    return None, (
        "held hours: {resolution:g} s intervals holding a sample"
        + (f"; {why}" if why and not presence else "")
    )


def _pods(
    counted: dict[Key, dict[int, float]],
    interval: float,
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
