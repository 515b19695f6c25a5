"""What each mode can read about the job once a second, cheaply.

    reading                      agent (in the job)           sidecar
    step time, steps/s           the step markers' counts     the job's own /metrics
                                                              (PROFILER_JOB_METRICS_URL; the
                                                              job serves them with
                                                              PROFILER_JOB_METRICS_PORT), else
                                                              Prometheus, when set
    memory in use, host          this process's RSS           the job's RSS from /proc/PID
                                                              (PROFILER_WATCH_PROCESS; a
                                                              shared PID namespace)
    memory in use, GPU:N         TF's allocator (current)     - (TF's allocator is in the job)
    GPU memory of the process    NVML, this pid               NVML, the job's pid: what TF's
                                                              allocator reserved, not uses
    GPU utilisation              NVML                         NVML
    CPU cores used, available    this process's CPU time,     the job's, from /proc/PID
                                 its cgroup quota or affinity (PROFILER_WATCH_PROCESS)

Host capacity is the process's cgroup memory limit (what the OOM killer enforces in a
container), else the host's memory. GPU capacity is the device's memory (NVML).

A source names the readings it is there for (`readings`) and says why it read none of them
(`silence()`), so a snapshot's lead-up states the true cause of a missing series (a sidecar
cannot see the step markers inside the job) instead of guessing; `NotRead` stands for a reading
this mode has no source for, with what would give it.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import psutil

from profiler_service.probes.gpu import GpuProbe, GpuReading
from profiler_service.probes.steps import STEP_STATS, StepStats
from profiler_service.probes.tf_memory import TFMemoryProbe

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
_UNLIMITED = 1 << 60  # cgroup v1 writes a huge number for "no limit"


class Source(Protocol):
    name: str

    def read(self) -> dict[str, float]: ...


def readings_of(source: Source) -> tuple[str, ...]:
    """The readings `source` is there for (optional on a source: none)."""
    return tuple(getattr(source, "readings", ()))


def silence_of(source: Source) -> str:
    """Why `source` read nothing lately (optional on a source: its name)."""
    silence = getattr(source, "silence", None)
    return silence() if callable(silence) else f"{type(source).__name__} read nothing"


# The reading whose absence a note explains (steps_per_s goes with it).
STEP_READINGS = ("step_time_ms",)
SIDECAR_STEPS_HINT = (
    "the sidecar does not read the job's step timings: `ProfilerStepCallback` and "
    "`training_step` time the steps inside the job's process. Serve them from the job "
    "(PROFILER_JOB_METRICS_PORT=9464 in its environment, or `start_job_metrics_server(9464)`) "
    "and set PROFILER_JOB_METRICS_URL=http://127.0.0.1:9464/metrics on the sidecar, or give it "
    "the Prometheus that scrapes them (PROFILER_PROMETHEUS_URL)"
)

UNWATCHED_HINT = (
    "the job's process is not watched (PROFILER_WATCH_PROCESS: its pid or a regular expression "
    "of its command line, in a shared PID namespace)"
)


class NotRead:
    """A reading this mode has no source for: reads nothing, says what would give it."""

    name = "none"

    def __init__(self, readings: tuple[str, ...], why: str):
        self.readings = readings
        self._why = why

    def read(self) -> dict[str, float]:
        return {}

    def silence(self) -> str:
        return self._why


def _cgroups(pid: int | str) -> list[tuple[str, str]]:
    """(controllers, path) of each cgroup the process is in; controllers "" is cgroup v2."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    return [tuple(line.split(":", 2)[1:]) for line in lines if line.count(":") >= 2]


def memory_limit_bytes(pid: int | str = "self") -> int:
    """The process's cgroup memory limit (v2 `memory.max`, v1 `memory.limit_in_bytes`), else
    the host's memory: the figure an out-of-memory kill is measured against."""
    for controllers, path in _cgroups(pid):
        if controllers == "":
            candidates = [CGROUP_ROOT / path.lstrip("/") / "memory.max"]
        elif "memory" in controllers.split(","):
            candidates = [CGROUP_ROOT / "memory" / path.lstrip("/") / "memory.limit_in_bytes"]
        else:
            continue
        for candidate in candidates:
            try:
                text = candidate.read_text().strip()
            except OSError:
                continue
            if text.isdigit() and 0 < int(text) < _UNLIMITED:
                return int(text)
    return psutil.virtual_memory().total


def _gpu_name(reading: GpuReading) -> str:
    return f"GPU:{reading.labels[0]}"


class _StepDelta:
    """Step time and steps over the last interval, from cumulative (steps, seconds) counters."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    def since_last(self, count: float, total_s: float) -> dict[str, float]:
        last, self._last = self._last, (count, total_s)
        if last is not None and count < last[0]:  # the job restarted: counting anew
            last = None
        if last is None or count <= last[0]:
            return {"steps_per_s": 0.0} if last is not None else {}
        steps = count - last[0]
        return {"step_time_ms": 1000 * (total_s - last[1]) / steps, "steps_per_s": float(steps)}


class StepSource:
    """Step time over the last interval from the step markers' counters (agent only)."""

    name = "agent"
    readings = STEP_READINGS

    def __init__(self, stats: StepStats = STEP_STATS):
        self.stats = stats
        self._delta = _StepDelta()

    def read(self) -> dict[str, float]:
        series = self.stats.snapshot().values()
        count = sum(c for _, c, _ in series)
        total = sum(s for _, _, s in series)
        return self._delta.since_last(count, total)

    def silence(self) -> str:
        return (
            "the job marked no step (`ProfilerStepCallback` in `fit()`'s callbacks, or "
            "`training_step` around a custom loop's step)"
        )


STEPS_TOTAL = "profiler_training_steps"  # a counter: its sample is `..._total`
STEP_SECONDS = "profiler_training_step_duration_seconds"


class JobMetricsSource:
    """A sidecar's step timings: the job's own `/metrics` (exporters/job_metrics.py), read
    each interval; the same counters the agent's StepSource reads in-process."""

    name = "job"
    readings = STEP_READINGS

    def __init__(self, url: str, timeout_s: float = 1.0):
        self.url = url
        self.timeout_s = timeout_s
        self._delta = _StepDelta()
        self._problem: str | None = None  # why the last read gave nothing

    def read(self) -> dict[str, float]:
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        try:
            response = httpx.get(self.url, timeout=self.timeout_s)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self._problem = f"the job's metrics at {self.url} did not answer ({_describe(exc)})"
            return {}
        count = total = 0.0
        found = False
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if sample.name == f"{STEPS_TOTAL}_total":
                    count, found = count + sample.value, True
                elif sample.name == f"{STEP_SECONDS}_sum":
                    total += sample.value
        if not found:  # no step marked yet: the first ones count from zero
            self._delta.since_last(0.0, 0.0)
            self._problem = (
                f"the job's metrics at {self.url} count no step: nothing in the job marks its "
                "steps (`ProfilerStepCallback` in `fit()`'s callbacks, or `training_step`)"
            )
            return {}
        values = self._delta.since_last(count, total)
        self._problem = None
        if not values.get("steps_per_s"):
            self._problem = f"the job's metrics at {self.url} counted no new step (is it training?)"
        return values

    def silence(self) -> str:
        return self._problem or f"the job's metrics at {self.url} were not read yet"


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ProcessMemorySource:
    """A process's RSS against its cgroup limit: this one (agent) or the job (sidecar)."""

    readings = ("memory_in_use_bytes",)

    def __init__(
        self,
        pid: Callable[[], int | None] = os.getpid,
        name: str = "agent",
        limit_bytes: int | None = None,
    ):
        self._pid = pid
        self.name = name
        self.limit_bytes = limit_bytes  # PROFILER_MEMORY_WATCH_CAPACITY_BYTES: the real limit
        self._limit: tuple[int, int] | None = None  # (pid, bytes): a limit changes with the pid
        self._problem: str | None = None

    def read(self) -> dict[str, float]:
        pid = self._pid()
        if pid is None:
            self._problem = _unwatched(self._pid)
            return {}
        try:
            rss = psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied) as exc:
            self._problem = f"the job's process {pid} could not be read ({type(exc).__name__})"
            return {}
        self._problem = None
        if self._limit is None or self._limit[0] != pid:
            self._limit = (pid, self.limit_bytes or memory_limit_bytes(pid))
        return {"memory_in_use_bytes|host": rss, "memory_capacity_bytes|host": self._limit[1]}

    def silence(self) -> str:
        return self._problem or "the job's memory was not read yet"


def _unwatched(pid: Callable[[], int | None]) -> str:
    spec = getattr(pid, "spec", None)
    if spec is None:
        return "no process to read"
    return (
        f"no process matches PROFILER_WATCH_PROCESS={spec!r} (the sidecar sees the job's "
        "processes only in a shared PID namespace: `shareProcessNamespace: true`)"
    )


def cpu_cores_available(pid: int | str = "self") -> float:
    """The cores a process may use: its cgroup CPU quota (v2 `cpu.max`, v1
    `cpu.cfs_quota_us` / `cpu.cfs_period_us`), else the CPUs it may run on (its affinity)."""
    for controllers, path in _cgroups(pid):
        base = path.lstrip("/")
        try:
            if controllers == "":
                quota, _, period = (CGROUP_ROOT / base / "cpu.max").read_text().partition(" ")
            elif "cpu" in controllers.split(","):
                v1 = CGROUP_ROOT / controllers / base
                quota = (v1 / "cpu.cfs_quota_us").read_text()
                period = (v1 / "cpu.cfs_period_us").read_text()
            else:
                continue
        except OSError:
            continue
        quota = quota.strip()
        if quota.lstrip("-").isdigit() and int(quota) > 0 and period.strip().isdigit():
            return int(quota) / int(period)
    try:
        process = psutil.Process(None if pid == "self" else int(pid))
        return float(len(process.cpu_affinity()))
    except (psutil.Error, AttributeError, ValueError):
        return float(os.cpu_count() or 1)


class ProcessCpuSource:
    """The cores a process used since the last reading (its CPU time over the wall time) and
    the cores it may use: this one (agent) or the job (sidecar). What a fix that parallelises
    its work can win depends on both (analysis/input_impact.py)."""

    def __init__(self, pid: Callable[[], int | None] = os.getpid, name: str = "agent"):
        self._pid = pid
        self.name = name
        self._last: tuple[int, float, float] | None = None  # pid, CPU seconds, monotonic
        self._available: tuple[int, float] | None = None
        self._problem: str | None = None

    def silence(self) -> str:
        return self._problem or "the job's CPU time was not read yet"

    def read(self) -> dict[str, float]:
        pid = self._pid()
        if pid is None:
            self._problem = _unwatched(self._pid)
            return {}
        try:
            times = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied) as exc:
            self._problem = f"the job's process {pid} could not be read ({type(exc).__name__})"
            return {}
        self._problem = None
        now, used = time.monotonic(), times.user + times.system
        if self._available is None or self._available[0] != pid:
            self._available = (pid, cpu_cores_available(pid))
        values = {"cpu_cores_available|host": self._available[1]}
        last, self._last = self._last, (pid, used, now)
        if last is not None and last[0] == pid and now > last[2]:
            values["cpu_cores_used|host"] = round((used - last[1]) / (now - last[2]), 3)
        return values


class TFMemorySource:
    """TensorFlow's allocator per GPU (agent only), through the metrics' collector."""

    name = "agent"

    def __init__(self, collector: TFMemoryProbe, gpu: GpuProbe | None = None):
        self.collector = collector
        self.gpu = gpu

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        totals = {}
        if self.gpu is not None:
            totals = {_gpu_name(r): r.memory_total_bytes for r in self.gpu.read(0.5)}
        for device, device_type, current, _ in self.collector.read():
            if device_type != "GPU":
                continue  # the host allocator's bytes are in the RSS
            values[f"memory_in_use_bytes|{device}"] = current
            if totals.get(device):
                values[f"memory_capacity_bytes|{device}"] = totals[device]
        return values


class GpuSource:
    """NVML: utilisation per GPU, and the device memory the watched process holds."""

    name = "nvml"

    def __init__(self, collector: GpuProbe, pid: Callable[[], int | None] | None = None):
        self.collector = collector
        self._pid = pid

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        pid = self._pid() if self._pid is not None else None
        for r in self.collector.read(0.5):
            gpu = _gpu_name(r)
            if r.utilization is not None:
                values[f"gpu_utilization_ratio|{gpu}"] = r.utilization
            used = r.memory_used_bytes
            if pid is not None:
                used = (r.process_memory_bytes or {}).get(pid)
            if used is not None:
                values[f"gpu_memory_used_bytes|{gpu}"] = used
                if r.memory_total_bytes:
                    values[f"gpu_memory_total_bytes|{gpu}"] = r.memory_total_bytes
        return values

    def silence(self) -> str:
        reason = self.collector.unavailable_reason or "NVML read no GPU"
        return f"no GPU readings ({reason})"


class WatchedProcess:
    """The sidecar's job process: a pid, or the lowest pid whose command line matches a regular
    expression, looked up again when it exits (a restarted job has a new pid)."""

    def __init__(self, spec: str):
        self.spec = spec.strip()
        self._pattern = None if self.spec.isdigit() else re.compile(self.spec)
        self._pid: int | None = int(self.spec) if self.spec.isdigit() else None

    def __call__(self) -> int | None:
        if self._pid is not None and psutil.pid_exists(self._pid):
            return self._pid
        if self._pattern is None:
            return None
        self._pid = None
        me = os.getpid()
        for process in sorted(psutil.process_iter(["pid", "cmdline"]), key=lambda p: p.pid):
            cmdline = " ".join(process.info.get("cmdline") or [])
            if process.pid != me and cmdline and self._pattern.search(cmdline):
                self._pid = process.pid
                break
        return self._pid
