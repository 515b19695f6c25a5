"""TensorFlow device memory: TF's get_memory_info contract, and the real CPU-only process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from profiler_service.exporters.tf_collector import TFMemoryCollector


def scrape(collector) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


class FakeTF:
    """Stands in for `tensorflow`: `tf.config.list_logical_devices()` and
    `tf.config.experimental.get_memory_info(device)` -> {"current", "peak"} in bytes, raising
    ValueError for a device it cannot describe (TF's documented behaviour)."""

    def __init__(self, memory: dict[str, dict | None]):
        self.asked: list[str] = []

        def get_memory_info(device: str) -> dict:
            self.asked.append(device)
            info = memory[device]
            if info is None:
                raise ValueError(f"No matching device found for '{device}'")
            return info

        devices = [
            SimpleNamespace(name=f"/device:{name}", device_type=name.split(":")[0])
            for name in memory
        ]
        self.config = SimpleNamespace(
            list_logical_devices=lambda: devices,
            experimental=SimpleNamespace(get_memory_info=get_memory_info),
        )


def test_device_memory_per_device_and_cpu_without_statistics_left_out():
    tf = FakeTF(
        {
            "CPU:0": {"current": 0, "peak": 0},
            "GPU:0": {"current": 3 * 2**30, "peak": 5 * 2**30},
            "TPU:0": None,
        }
    )
    collector = TFMemoryCollector(lambda: tf)
    m = scrape(collector)
    gpu = {"device": "GPU:0", "device_type": "GPU"}
    assert m["profiler_tf_device_memory_bytes"] == [(gpu, 3 * 2**30)]
    assert m["profiler_tf_device_memory_peak_bytes"] == [(gpu, 5 * 2**30)]
    scrape(collector)
    assert tf.asked.count("TPU:0") == 1  # a device that refused is not asked again
    assert tf.asked.count("GPU:0") == 2


def test_nothing_without_tensorflow_in_the_process():
    assert scrape(TFMemoryCollector(lambda: None)) == {}


def test_real_tensorflow_on_cpu_reports_no_allocator_statistics():
    """In a process of its own: once a profiler has traced in a process, TF keeps the CPU
    allocator's statistics, and this test suite's process has run many captures."""
    code = (
        "import json, sys; sys.path.insert(0, 'tests/exporters');"
        "import tensorflow as tf; from test_tf_collector import scrape;"
        "from profiler_service.exporters.tf_collector import TFMemoryCollector;"
        "tf.reduce_sum(tf.ones((64, 64))); print(json.dumps(scrape(TFMemoryCollector())))"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    root = Path(__file__).parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root
    )
    assert out.returncode == 0, out.stderr[-2000:]
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m == {"profiler_tf_device_memory_bytes": [], "profiler_tf_device_memory_peak_bytes": []}
