"""GPU utilisation through NVML (`nvidia-ml-py`), read at scrape time.

NVML is initialised at the first scrape. Without a GPU, a driver or the library, the collector
exports `profiler_gpu_metrics_available 0`, logs why once, and the service carries on. A reading a
device does not support (MIG slices have no utilisation) leaves that one sample out.

How the names translate from NVIDIA's DCGM exporter (README, "Metrics", has the table):
`DCGM_FI_DEV_GPU_UTIL` (%) = 100 x `profiler_gpu_utilization_ratio`;
`DCGM_FI_DEV_FB_USED` (MiB) = `profiler_gpu_memory_used_bytes` / 2**20;
`DCGM_FI_DEV_POWER_USAGE` (W) = `profiler_gpu_power_watts`;
`DCGM_FI_DEV_GPU_TEMP` (C) = `profiler_gpu_temperature_celsius`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

__all__ = ["GpuCollector"]

log = logging.getLogger(__name__)

_LABELS = ["gpu", "uuid", "model_name"]


@dataclass(frozen=True)
class _Device:
    handle: Any
    labels: tuple[str, str, str]


def _load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py: pure Python, loads libnvidia-ml.so only in nvmlInit()

    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuCollector:
    """Per-GPU utilisation, memory, power and temperature; `nvml` is the pynvml module's API."""

    def __init__(self, nvml: Any | Callable[[], Any] = _load_pynvml):
        self._nvml_source = nvml
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._devices: list[_Device] | None = None
        self._unavailable_reason: str | None = None

    @property
    def unavailable_reason(self) -> str | None:
        """Why no GPU is exported (None while available or before the first scrape)."""
        return self._unavailable_reason

    def _init(self) -> list[_Device] | None:
        with self._lock:
            if self._devices is not None or self._unavailable_reason is not None:
                return self._devices
            try:
                nvml = self._nvml_source() if callable(self._nvml_source) else self._nvml_source
                nvml.nvmlInit()
                devices = []
                for index in range(nvml.nvmlDeviceGetCount()):
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    labels = (
                        str(index),
                        _text(nvml.nvmlDeviceGetUUID(handle)),
                        _text(nvml.nvmlDeviceGetName(handle)),
                    )
                    devices.append(_Device(handle, labels))
            except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded...
                self._unavailable_reason = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "GPU metrics unavailable (%s); exporting profiler_gpu_metrics_available 0",
                    self._unavailable_reason,
                )
                return None
            if not devices:
                self._unavailable_reason = "NVML found no GPU"
                log.warning("GPU metrics unavailable: NVML found no GPU")
                return None
            self._nvml, self._devices = nvml, devices
            log.info("GPU metrics from NVML: %d GPU(s)", len(devices))
            return devices

    def collect(self) -> Iterator[Metric]:
        devices = self._init()
        yield GaugeMetricFamily(
            "profiler_gpu_metrics_available",
            "1 when NVML answers and found a GPU, else 0 (the log says why).",
            value=1 if devices else 0,
        )
        if not devices:
            return
        nvml = self._nvml
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
        for device in devices:
            labels = list(device.labels)
            h = device.handle
            util = _read(nvml, nvml.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                families["util"].add_metric(labels, util.gpu / 100.0)
                families["mem_util"].add_metric(labels, util.memory / 100.0)
            memory = _read(nvml, nvml.nvmlDeviceGetMemoryInfo, h)
            if memory is not None:
                families["used"].add_metric(labels, float(memory.used))
                families["total"].add_metric(labels, float(memory.total))
            milliwatts = _read(nvml, nvml.nvmlDeviceGetPowerUsage, h)
            if milliwatts is not None:
                families["power"].add_metric(labels, milliwatts / 1000.0)
            celsius = _read(nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
            if celsius is not None:
                families["temp"].add_metric(labels, float(celsius))
        yield from families.values()


def _read(nvml: Any, function: Callable[..., Any], *args: Any) -> Any:
    """One NVML reading, or None when the device does not support it (or it failed now)."""
    try:
        return function(*args)
    except nvml.NVMLError:
        return None
