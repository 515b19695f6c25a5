"""The GPUs through NVML (`nvidia-ml-py`): what the look-back sampler samples each second and the
`/metrics` collector exposes at scrape time (exporters/gpu_collector.py).

NVML is initialised at the first reading. Without a GPU, a driver or the library, there is no
reading, the reason is kept (`unavailable_reason`) and logged once, and the service carries on. A
reading a device does not support (MIG slices have no utilisation) is left out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["GpuProbe", "GpuReading"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Device:
    handle: Any
    labels: tuple[str, str, str]


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment; None where the device does not support the reading."""

    labels: tuple[str, str, str]  # index, uuid, model name
    utilization: float | None = None  # 0-1
    memory_utilization: float | None = None  # 0-1
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    temperature_celsius: float | None = None
    # Device memory used by each process (pid -> bytes), as NVML sees the pids.
    process_memory_bytes: dict[int, int] | None = None


def _load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py: pure Python, loads libnvidia-ml.so only in nvmlInit()

    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuProbe:
    """Per-GPU utilisation, memory, power and temperature; `nvml` is the pynvml module's API."""

    def __init__(self, nvml: Any | Callable[[], Any] = _load_pynvml, max_age_s: float = 0.0):
        self._nvml_source = nvml
        self.max_age_s = max_age_s  # scrapes reuse a reading this young (the sampler's)
        self._cached: tuple[float, list[GpuReading]] | None = None
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

    def read(self, max_age_s: float = 0.0) -> list[GpuReading]:
        """Every GPU now; a reading younger than `max_age_s` is reused (the sampler reads each
        second, so a scrape then costs no second round of NVML calls)."""
        devices = self._init()
        if not devices:
            return []
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] <= max_age_s:
                return self._cached[1]
        nvml = self._nvml
        readings = []
        for device in devices:
            h = device.handle
            util = _read(nvml, nvml.nvmlDeviceGetUtilizationRates, h)
            memory = _read(nvml, nvml.nvmlDeviceGetMemoryInfo, h)
            milliwatts = _read(nvml, nvml.nvmlDeviceGetPowerUsage, h)
            celsius = _read(nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
            processes = _read(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, h)
            readings.append(
                GpuReading(
                    labels=device.labels,
                    utilization=util.gpu / 100.0 if util is not None else None,
                    memory_utilization=util.memory / 100.0 if util is not None else None,
                    memory_used_bytes=int(memory.used) if memory is not None else None,
                    memory_total_bytes=int(memory.total) if memory is not None else None,
                    power_watts=milliwatts / 1000.0 if milliwatts is not None else None,
                    temperature_celsius=float(celsius) if celsius is not None else None,
                    process_memory_bytes=_process_memory(processes),
                )
            )
        with self._lock:
            self._cached = (time.monotonic(), readings)
        return readings


def _process_memory(processes: Any) -> dict[int, int] | None:
    """pid -> bytes; NVML reports None (NVML_VALUE_NOT_AVAILABLE) without the rights to see."""
    if processes is None:
        return None
    found = {}
    for process in processes:
        used = getattr(process, "usedGpuMemory", None)
        if used is not None and used >= 0:
            found[int(process.pid)] = int(used)
    return found


def _read(nvml: Any, function: Callable[..., Any], *args: Any) -> Any:
    """One NVML reading, or None when the device does not support it (or it failed now)."""
    try:
        return function(*args)
    except nvml.NVMLError:
        return None
