"""GPU utilisation through NVML (`nvidia-ml-py`), read at scrape time.

NVML is initialised at the first scrape. Without a GPU, a driver or the library, the collector
exports `profiler_gpu_metrics_available 0`, logs why once, and the service carries on. A reading a
device does not support (MIG slices have no utilisation) leaves that one sample out.

How the names translate from NVIDIA's DCGM exporter (docs/metrics.md has the table):
`DCGM_FI_DEV_GPU_UTIL` (%) = 100 x `profiler_gpu_utilization_ratio`;
`DCGM_FI_DEV_FB_USED` (MiB) = `profiler_gpu_memory_used_bytes` / 2**20;
`DCGM_FI_DEV_POWER_USAGE` (W) = `profiler_gpu_power_watts`;
`DCGM_FI_DEV_GPU_TEMP` (C) = `profiler_gpu_temperature_celsius`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from profiler_service.probes.gpu import GpuProbe

__all__ = ["GpuCollector"]

_LABELS = ["gpu", "uuid", "model_name"]


class GpuCollector(GpuProbe):
    """The NVML probe, exposed: `profiler_gpu_*` per GPU at each scrape."""

    def collect(self) -> Iterator[Metric]:
        devices = self._init()
        yield GaugeMetricFamily(
            "profiler_gpu_metrics_available",
            "1 when NVML answers and found a GPU, else 0 (the log says why).",
            value=1 if devices else 0,
        )
        if not devices:
            return
        families = {
            "util": GaugeMetricFamily(
                "profiler_gpu_utilization_ratio",
                "Share (0-1) of the last sample period in which a kernel ran "
                "(DCGM_FI_DEV_GPU_UTIL/100).",
                labels=_LABELS,
                unit="ratio",
            ),
            "mem_util": GaugeMetricFamily(
                "profiler_gpu_memory_utilization_ratio",
                "Share (0-1) of the last sample period in which device memory was read or written "
                "(DCGM_FI_DEV_MEM_COPY_UTIL/100).",
                labels=_LABELS,
                unit="ratio",
            ),
            "used": GaugeMetricFamily(
                "profiler_gpu_memory_used_bytes",
                "Device memory in use (DCGM_FI_DEV_FB_USED is this in MiB).",
                labels=_LABELS,
                unit="bytes",
            ),
            "total": GaugeMetricFamily(
                "profiler_gpu_memory_total_bytes",
                "Device memory installed (DCGM_FI_DEV_FB_TOTAL is this in MiB).",
                labels=_LABELS,
                unit="bytes",
            ),
            "power": GaugeMetricFamily(
                "profiler_gpu_power_watts",
                "Power draw (DCGM_FI_DEV_POWER_USAGE).",
                labels=_LABELS,
                unit="watts",
            ),
            "temp": GaugeMetricFamily(
                "profiler_gpu_temperature_celsius",
                "GPU die temperature (DCGM_FI_DEV_GPU_TEMP).",
                labels=_LABELS,
                unit="celsius",
            ),
        }
        for r in self.read(self.max_age_s):
            labels = list(r.labels)
            if r.utilization is not None:
                families["util"].add_metric(labels, r.utilization)
            if r.memory_utilization is not None:
                families["mem_util"].add_metric(labels, r.memory_utilization)
            if r.memory_used_bytes is not None:
                families["used"].add_metric(labels, float(r.memory_used_bytes))
            if r.memory_total_bytes is not None:
                families["total"].add_metric(labels, float(r.memory_total_bytes))
            if r.power_watts is not None:
                families["power"].add_metric(labels, r.power_watts)
            if r.temperature_celsius is not None:
                families["temp"].add_metric(labels, r.temperature_celsius)
        yield from families.values()
