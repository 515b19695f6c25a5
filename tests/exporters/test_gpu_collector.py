"""GPU collector: NVML's documented contract through a stand-in, and the real no-GPU path.

NVML cannot run on this machine (no NVIDIA driver), so `FakeNVML` below stands in for the
`pynvml` module. It follows NVML's documented function contract (NVML API reference, "Device
Queries"): `nvmlDeviceGetUtilizationRates` gives percent (0-100) in `.gpu` and `.memory`,
`nvmlDeviceGetMemoryInfo` gives bytes in `.total/.free/.used`, `nvmlDeviceGetPowerUsage` gives
milliwatts, `nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)` gives degrees C, and a reading the
device does not support raises `NVMLError_NotSupported` (MIG slices have no utilisation), and
`nvmlDeviceGetComputeRunningProcesses` lists `.pid` and `.usedGpuMemory` (bytes, or None).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pynvml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from profiler_service.exporters.gpu_collector import GpuCollector


class FakeNVML:
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: list[dict], init_error: Exception | None = None):
        self.gpus = gpus
        self.init_error = init_error
        self.init_calls = 0

    def nvmlInit(self):
        self.init_calls += 1
        if self.init_error:
            raise self.init_error

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"]

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def _get(self, h, key):
        value = h.get(key)
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetUtilizationRates(self, h):
        gpu, memory = self._get(h, "util")
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetMemoryInfo(self, h):
        total, used = self._get(h, "mem")
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._get(h, "mw")

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._get(h, "temp")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        # nvmlProcessInfo_t: pid and usedGpuMemory in bytes; pynvml gives None for
        # NVML_VALUE_NOT_AVAILABLE (a process NVML may not account, e.g. without the rights).
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in h.get("procs", [])]


def scrape(collector: GpuCollector) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


def test_readings_are_converted_to_base_units_per_gpu():
    fake = FakeNVML(
        [
            {
                "uuid": "GPU-aaa",
                "name": "NVIDIA H100 80GB HBM3",
                "util": (87, 40),
                "mem": (80 * 2**30, 30 * 2**30),
                "mw": 312_500,
                "temp": 61,
            },
            # A MIG-style device: no utilisation, no power; memory and temperature only.
            {
                "uuid": b"MIG-bbb",
                "name": b"NVIDIA A100 MIG 1g.10gb",
                "mem": (10 * 2**30, 0),
                "temp": 50,
            },
        ]
    )
    metrics = scrape(GpuCollector(fake))
    h100 = {"gpu": "0", "uuid": "GPU-aaa", "model_name": "NVIDIA H100 80GB HBM3"}
    mig = {"gpu": "1", "uuid": "MIG-bbb", "model_name": "NVIDIA A100 MIG 1g.10gb"}
    assert metrics["profiler_gpu_metrics_available"] == [({}, 1.0)]
    assert metrics["profiler_gpu_utilization_ratio"] == [(h100, 0.87)]
    assert metrics["profiler_gpu_memory_utilization_ratio"] == [(h100, 0.40)]
    assert metrics["profiler_gpu_memory_used_bytes"] == [(h100, 30 * 2**30), (mig, 0.0)]
    assert metrics["profiler_gpu_memory_total_bytes"] == [(h100, 80 * 2**30), (mig, 10 * 2**30)]
    assert metrics["profiler_gpu_power_watts"] == [(h100, 312.5)]
    assert metrics["profiler_gpu_temperature_celsius"] == [(h100, 61.0), (mig, 50.0)]


def test_nvml_is_initialised_once_and_read_at_every_scrape():
    gpu = {"uuid": "GPU-a", "name": "T4", "util": (10, 1), "mem": (100, 50), "mw": 1, "temp": 1}
    fake = FakeNVML([gpu])
    collector = GpuCollector(fake)
    scrape(collector)
    gpu["util"] = (55, 1)
    assert scrape(collector)["profiler_gpu_utilization_ratio"][0][1] == 0.55
    assert fake.init_calls == 1


def test_driver_not_loaded_exports_zero_and_logs_the_reason_once(caplog):
    fake = FakeNVML([], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    collector = GpuCollector(fake)
    with caplog.at_level(logging.WARNING, logger="profiler_service.probes.gpu"):
        for _ in range(3):
            metrics = scrape(collector)
    assert metrics == {"profiler_gpu_metrics_available": [({}, 0.0)]}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "Driver Not Loaded" in lines[0]
    assert fake.init_calls == 1


def test_nvml_without_devices_exports_zero():
    assert scrape(GpuCollector(FakeNVML([])))["profiler_gpu_metrics_available"] == [({}, 0.0)]


def test_real_nvml_on_this_machine(caplog):
    """The real pynvml module. Here (no NVIDIA driver) nvmlInit() fails: 0 and one log line.

    On a machine with a GPU the same test checks the other branch: 1 and a sample per GPU.
    """
    try:
        pynvml.nvmlInit()
        gpus, reason = pynvml.nvmlDeviceGetCount(), None
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        gpus, reason = 0, str(exc)
    collector = GpuCollector()  # the default: imports the real pynvml
    with caplog.at_level(logging.WARNING, logger="profiler_service.probes.gpu"):
        first, second = scrape(collector), scrape(collector)
    if reason is not None:
        assert first == second == {"profiler_gpu_metrics_available": [({}, 0.0)]}
        assert reason in collector.unavailable_reason
        assert len(caplog.records) == 1 and reason in caplog.records[0].getMessage()
    else:
        assert first["profiler_gpu_metrics_available"] == [({}, 1.0)]
        assert len(first["profiler_gpu_memory_total_bytes"]) == gpus


def test_a_reading_the_sampler_just_took_is_reused_by_the_scrape():
    """The look-back sampler reads NVML once a second; a scrape within `max_age_s` reuses it."""
    gpu = {"uuid": "GPU-a", "name": "T4", "util": (10, 1), "mem": (100, 50), "mw": 1, "temp": 1}
    collector = GpuCollector(FakeNVML([gpu]), max_age_s=60)
    collector.read(0.5)  # the sampler's reading
    gpu["util"] = (55, 1)
    assert scrape(collector)["profiler_gpu_utilization_ratio"][0][1] == 0.10  # not read again
    assert collector.read(0)[0].utilization == 0.55  # a fresh reading when asked for one


def test_the_look_back_source_reads_the_watched_process_gpu_memory():
    from profiler_service.lookback.sources import GpuSource

    gpu = {
        "uuid": "GPU-a", "name": "H100", "util": (80, 30), "mem": (80 * 2**30, 70 * 2**30),
        "mw": 1, "temp": 1, "procs": [(4242, 60 * 2**30), (4343, None)],
    }  # fmt: skip
    collector = GpuCollector(FakeNVML([gpu]))
    job = GpuSource(collector, pid=lambda: 4242).read()
    assert job == {
        "gpu_utilization_ratio|GPU:0": 0.8,
        "gpu_memory_used_bytes|GPU:0": 60 * 2**30,  # the job's own, not the device's 70 GiB
        "gpu_memory_total_bytes|GPU:0": 80 * 2**30,
    }
    hidden = GpuSource(collector, pid=lambda: 4343).read()  # NVML may not account a process
    assert "gpu_memory_used_bytes|GPU:0" not in hidden
    device = GpuSource(collector).read()  # no process to watch: the whole device
    assert device["gpu_memory_used_bytes|GPU:0"] == 70 * 2**30
