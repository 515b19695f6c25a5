"""`profiler_tf_device_memory_bytes` and `..._peak_bytes`: the TF memory probe, exposed. Registered
only by the embedded agent; it never imports TensorFlow (probes/tf_memory.py)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from profiler_service.probes.tf_memory import TFMemoryProbe

__all__ = ["TFMemoryCollector"]


class TFMemoryCollector(TFMemoryProbe):
    """`profiler_tf_device_memory_bytes` and `..._peak_bytes` per logical device."""

    def collect(self) -> Iterator[Metric]:
        if self._tf_module() is None:
            return
        current = GaugeMetricFamily(
            "profiler_tf_device_memory_bytes",
            "Bytes TensorFlow's allocator holds on the device now (get_memory_info current).",
            labels=["device", "device_type"],
            unit="bytes",
        )
        peak = GaugeMetricFamily(
            "profiler_tf_device_memory_peak_bytes",
            "Most bytes TensorFlow's allocator held on the device since start or reset.",
            labels=["device", "device_type"],
            unit="bytes",
        )
        for name, device_type, now, most in self.read(self.max_age_s):
            current.add_metric([name, device_type], float(now))
            peak.add_metric([name, device_type], float(most))
        yield current
        yield peak
