"""The GPU-hours each pod held and kept busy, per bucket of the ledger's window, from Prometheus.

Two range queries over `hub_gpu_util_query` (one series per GPU while a pod holds it), evaluated
at every bucket's end, aggregated by namespace, pod and GPU model:
- held: how many `hub_ledger_resolution_s` intervals of the bucket held a sample of each GPU,
  a subquery of `present_over_time`; independent of the scrape interval, off by at most one
  interval where a series starts or stops. Where `hub_gpu_scrape_interval_s` says the scrape
  interval, it is the bucket's samples x that interval instead: one pass over the raw samples,
  no subquery (bench/bench_ledger.py measures both);
- busy: held x the mean utilisation of the bucket's samples over `hub_gpu_util_max`.
Every range is shortened by 1 ms so that Prometheus 2's closed ranges and Prometheus 3's
left-open ones count the same samples and neighbouring buckets never share one.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from profiler_service.config import LedgerSettings

__all__ = ["GpuHoursUnavailable", "PodGpuHours", "bucket_ends", "query_gpu_hours"]


class GpuHoursUnavailable(Exception):
    """Prometheus could not say: the sentence says why (the ledger falls back to captures)."""


@dataclass
class PodGpuHours:
    namespace: str | None
    pod: str
    model: str | None
    held_s: dict[int, float] = field(default_factory=dict)  # bucket end (unix s) -> GPU-seconds
    busy_s: dict[int, float] = field(default_factory=dict)


def bucket_ends(start: int, end: int, bucket_s: int) -> list[int]:
    """The buckets' ends, tiling (start, end]."""
    return list(range(start + bucket_s, end + 1, bucket_s))


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def queries(settings: LedgerSettings, bucket_s: int) -> dict[str, str]:
    """The PromQL the ledger asks, by name."""
    q, res = settings.hub_gpu_util_query, settings.hub_ledger_resolution_s
    labels = [
        settings.hub_gpu_namespace_label,
        settings.hub_gpu_pod_label,
        settings.hub_gpu_model_label,
    ]
    by = f"sum by ({', '.join(labels)})"
    bucket = _ms(bucket_s - 0.001)
    asked = {
        "util_sum": f"{by} (sum_over_time({q}[{bucket}]))",
        "util_samples": f"{by} (count_over_time({q}[{bucket}]))",
    }
    if settings.hub_gpu_scrape_interval_s is None:
        asked["held_intervals"] = (
            f"{by} (count_over_time(present_over_time({q}[{_ms(res - 0.001)}])"
            f"[{bucket}:{_ms(res)}]))"
        )
    return asked


def query_gpu_hours(
    settings: LedgerSettings,
    start: int,
    end: int,
    bucket_s: int,
    client: httpx.Client | None = None,
) -> list[PodGpuHours]:
    """Every pod's GPU-seconds held and busy per bucket of (start, end]; raises
    GpuHoursUnavailable with the reason when Prometheus cannot answer."""
    url = settings.hub_prometheus_url
    if not url:
        raise GpuHoursUnavailable("no Prometheus is configured (hub_prometheus_url)")
    promql = queries(settings, bucket_s)
    window = {"start": str(start + bucket_s), "end": str(end), "step": f"{bucket_s}s"}
    http = client or httpx.Client(timeout=settings.hub_prometheus_timeout_s)
    try:
        with ThreadPoolExecutor(len(promql)) as pool:
            answers = dict(
                zip(
                    promql,
                    pool.map(lambda q: _ask(http, url, q, window), promql.values()),
                    strict=True,
                )
            )
    finally:
        if client is None:
            http.close()
    labels = (
        settings.hub_gpu_namespace_label,
        settings.hub_gpu_pod_label,
        settings.hub_gpu_model_label,
    )
    util = {k: _values(v) for k, v in _by_key(answers["util_sum"], labels).items()}
    samples = {k: _values(v) for k, v in _by_key(answers["util_samples"], labels).items()}
    top = settings.hub_gpu_util_max
    # seconds each counted value stands for: a resolution interval, or a scrape's
    res = settings.hub_ledger_resolution_s
    held_by = answers.get("held_intervals")
    if held_by is None:
        res, held_by = settings.hub_gpu_scrape_interval_s or 0.0, answers["util_samples"]
    pods = []
    for key, series in _by_key(held_by, labels).items():
        namespace, pod, model = key
        if not pod:
            continue  # a GPU no pod holds: not a job's
        found = PodGpuHours(namespace or None, pod, model or None)
        sums, counts = util.get(key, {}), samples.get(key, {})
        for t, intervals in _values(series).items():
            held = intervals * res
            mean = sums.get(t, 0.0) / counts[t] if counts.get(t) else 0.0
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


def _by_key(result: list[dict], labels: tuple[str, str, str]) -> dict[tuple[str, ...], Any]:
    return {tuple(r["metric"].get(name, "") for name in labels): r["values"] for r in result}


def _values(points: list[list[Any]]) -> dict[int, float]:
    out = {}
    for t, v in points:
        value = float(v)
        if math.isfinite(value):
            out[round(float(t))] = value
    return out
