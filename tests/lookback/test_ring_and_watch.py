"""The look-back ring, its sources and the memory watch's decisions.

The watch is driven sample by sample through its real ring; the capture controller it calls is
`fakes.RecordingController` here (the real one, with real jobs: tests/e2e/test_memory_watch.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import RecordingController

from profiler_service.config import WatchSettings
from profiler_service.lookback import sources
from profiler_service.lookback.ring import Sample, SampleRing
from profiler_service.lookback.sources import (
    ProcessMemorySource,
    StepSource,
    WatchedProcess,
    memory_limit_bytes,
)
from profiler_service.probes.steps import StepStats
from profiler_service.trigger.memory_watch import MemoryWatch

GIB = 2**30


def test_the_ring_keeps_its_window_and_reads_back_series():
    ring = SampleRing(seconds=10, interval_s=1)
    for t in range(30):
        ring.append(Sample(time=1000.0 + t, values={"rss": t, "memory_in_use_bytes|GPU:0": 2 * t}))
    assert len(ring) == 11  # 10 s at 1 s, both ends
    assert [s.time for s in ring.window(1025, 1027)] == [1025.0, 1026.0, 1027.0]
    series = {(s.name, tuple(s.labels.items())): s for s in ring.series(0, 2000, lambda k: "agent")}
    gpu = series["memory_in_use_bytes", (("device", "GPU:0"),)]
    assert gpu.unit == "bytes" and gpu.source == "agent"
    assert gpu.points[0] == (1019.0, 38) and gpu.points[-1] == (1029.0, 58)


def watch(controller, **settings) -> tuple[MemoryWatch, SampleRing]:
    config = WatchSettings(
        memory_watch_window_s=10,
        memory_watch_horizon_s=60,
        memory_watch_share=0.9,
        **{"memory_watch_growth_min_share": 0.0, **settings},
    )
    ring = SampleRing(300)
    return MemoryWatch(config, controller, ring, lambda key: "proc"), ring


def feed(w: MemoryWatch, ring: SampleRing, values, start: float = 0.0) -> None:
    for i, value in enumerate(values):
        sample = Sample(time=start + i, values=value)
        ring.append(sample)
        w(sample)


def host(in_use: float, capacity: float = 10 * GIB) -> dict:
    return {"memory_in_use_bytes|host": in_use, "memory_capacity_bytes|host": capacity}


def test_steady_growth_that_fills_capacity_within_the_horizon_is_captured():
    controller = RecordingController()
    w, ring = watch(controller)
    rate = 100 * 2**20  # 100 MiB/s from 2 GiB toward 10 GiB: full in about 80 s
    feed(w, ring, [host(2 * GIB + rate * t) for t in range(25)])
    [request] = controller.requests
    reading = request.trigger.memory
    assert request.trigger.kind == "memory_watch" and request.target == "job"
    assert (reading.reason, reading.device, reading.source) == ("growth", "host", "proc")
    assert reading.bytes_per_s == pytest.approx(rate, rel=1e-6)
    assert reading.seconds_to_capacity <= 60
    # It fired at the first sample that projected under the horizon, not before.
    expected = (10 * GIB - reading.in_use_bytes) / rate
    assert reading.seconds_to_capacity == pytest.approx(expected, abs=0.1)
    assert w.outcomes[("growth", "captured")] == 1


def test_growth_far_from_capacity_waits_for_the_growth_floor():
    controller = RecordingController()
    w, ring = watch(controller, memory_watch_growth_min_share=0.5)
    rate = 100 * 2**20  # filling buffers at start-up: fast, but 1 GiB of 10
    feed(w, ring, [host(GIB + rate * t) for t in range(30)])
    assert controller.requests == [] and w.last.seconds_to_capacity < 100
    feed(w, ring, [host(5 * GIB + rate * t) for t in range(3)], start=30)
    [request] = controller.requests
    assert request.trigger.memory.reason == "growth" and request.trigger.memory.share >= 0.5


def test_crossing_the_share_is_captured_and_then_the_watch_cools_down():
    controller = RecordingController()
    w, ring = watch(controller, memory_watch_cooldown_s=3600)
    feed(w, ring, [host(5 * GIB)] * 5 + [host(9.5 * GIB)] * 5)
    [request] = controller.requests  # the four samples after it fall in the cooldown
    assert request.trigger.memory.reason == "share"
    assert request.trigger.memory.share == pytest.approx(0.95)


def test_flat_noisy_or_slow_memory_is_not_captured():
    controller = RecordingController()
    w, ring = watch(controller)
    noisy = [host(4 * GIB + (GIB // 2 if t % 2 else 0)) for t in range(30)]
    feed(w, ring, noisy)
    slow = [host(4 * GIB + 2**20 * t) for t in range(30)]  # 1 MiB/s: full in hours
    feed(w, ring, slow, start=100)
    assert controller.requests == []
    assert w.last.seconds_to_capacity > 3600


def test_gpu_memory_reserved_by_tensorflow_counts_only_when_it_grows():
    controller = RecordingController()
    w, ring = watch(controller)
    reserved = {"gpu_memory_used_bytes|GPU:0": 75 * GIB, "gpu_memory_total_bytes|GPU:0": 80 * GIB}
    feed(w, ring, [reserved] * 20)  # 94 % "used": TF's allocator took it at start
    assert controller.requests == []
    growing = [
        {
            "gpu_memory_used_bytes|GPU:0": 60 * GIB + t * GIB // 2,
            "gpu_memory_total_bytes|GPU:0": 80 * GIB,
        }
        for t in range(20)
    ]
    feed(w, ring, growing, start=100)
    [request] = controller.requests
    assert request.trigger.memory.device == "GPU:0" and request.trigger.memory.reason == "growth"


def test_a_busy_target_is_counted_and_tried_again():
    controller = RecordingController(busy=True)
    w, ring = watch(controller)
    feed(w, ring, [host(9.5 * GIB)] * 3)
    assert w.outcomes[("share", "skipped_busy")] == 3
    controller.busy = False
    feed(w, ring, [host(9.5 * GIB)], start=10)
    assert len(controller.requests) == 1


def test_step_source_reads_step_time_from_the_step_markers_counters():
    stats = StepStats()
    source = StepSource(stats)
    assert source.read() == {}  # the first reading only sets the baseline
    for _ in range(4):
        stats.observe(0.050)
    assert source.read() == {"step_time_ms": pytest.approx(50.0), "steps_per_s": 4.0}
    assert source.read() == {"steps_per_s": 0.0}  # no step in the last interval


def test_memory_limit_is_the_cgroup_limit_else_the_hosts_memory(tmp_path, monkeypatch):
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    v2 = next((line for line in lines if line.startswith("0::")), None)
    monkeypatch.setattr(sources, "CGROUP_ROOT", tmp_path)
    import psutil

    assert memory_limit_bytes() == psutil.virtual_memory().total  # nothing readable: the host
    if v2 is None:
        pytest.fail(f"this test expects a cgroup v2 process (unified hierarchy): {lines}")
    group = tmp_path / v2.split("::", 1)[1].lstrip("/")
    group.mkdir(parents=True, exist_ok=True)
    (group / "memory.max").write_text("max\n")
    assert memory_limit_bytes() == psutil.virtual_memory().total  # "max": no limit
    (group / "memory.max").write_text("2147483648\n")
    assert memory_limit_bytes() == 2 * GIB
    reading = ProcessMemorySource().read()
    assert reading["memory_capacity_bytes|host"] == 2 * GIB
    assert reading["memory_in_use_bytes|host"] > 50 * 2**20  # this Python process, with pytest
    assert ProcessMemorySource(limit_bytes=GIB).read()["memory_capacity_bytes|host"] == GIB


def test_the_watched_process_is_found_by_its_command_line_and_followed():
    marker = f"profiler-watch-test-{os.getpid()}"
    code = f"import time; time.sleep(60)  # {marker}"  # a process to find: its sleep is no wait
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        watched = WatchedProcess(marker)
        assert watched() == proc.pid
        source = ProcessMemorySource(watched, name="proc")
        assert source.read()["memory_in_use_bytes|host"] > 0
    finally:
        proc.kill()
        proc.wait()
    assert watched() is None  # exited: nothing matches any more
    assert source.read() == {}
    assert WatchedProcess(str(os.getpid()))() == os.getpid()
