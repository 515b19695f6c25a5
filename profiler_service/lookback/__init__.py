r"""The minutes before a capture: a ring of cheap per-second samples, and Prometheus's history.

sources -> sampler (1 s) -> ring (PROFILER_LOOKBACK_S) -> every snapshot's `lead_up`
                             \-> memory watch (trigger/memory_watch.py), /metrics
Prometheus query_range (PROFILER_PROMETHEUS_URL) ----------> every snapshot's `lead_up`
"""
