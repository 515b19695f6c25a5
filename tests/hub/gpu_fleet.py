"""A fleet's week of GPU utilisation as NVIDIA's DCGM exporter reports it, written into a real
Prometheus TSDB with `promtool tsdb create-blocks-from openmetrics` (a plain module, like
helpers.py; bench/bench_ledger.py uses it too).

Each job runs one pod or two (a restart under a new name) for hours to the whole week, on 1 to
8 GPUs of one model; each GPU reports `DCGM_FI_DEV_GPU_UTIL` (an integer percent) every
`interval_s` around the job's own mean. The fleet keeps every sample it wrote, so a test holds
the ledger to the series themselves: GPU-hours held are samples x interval, busy ones the sum of
utilisation / 100 x interval.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

GPU_CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-captures"

MODELS = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA L4"]
GPU_COUNTS = [1, 1, 1, 2, 2, 4, 8]


@dataclass
class GpuSeries:
    namespace: str
    pod: str
    job: str
    gpu: int
    model: str
    times: np.ndarray  # unix seconds
    util: np.ndarray  # percent, integers
    interval_s: int = 30

    def held_s(self, start: float, end: float) -> float:
        return float(((self.times > start) & (self.times <= end)).sum()) * self.interval_s

    def busy_s(self, start: float, end: float) -> float:
        inside = (self.times > start) & (self.times <= end)
        return float(self.util[inside].sum()) / 100 * self.interval_s


@dataclass
class GpuFleet:
    series: list[GpuSeries] = field(default_factory=list)

    def jobs(self) -> dict[tuple[str, str], list[GpuSeries]]:
        out: dict[tuple[str, str], list[GpuSeries]] = {}
        for s in self.series:
            out.setdefault((s.namespace, s.job), []).append(s)
        return out

    def samples(self) -> int:
        return sum(len(s.times) for s in self.series)


def make_fleet(
    jobs: int,
    *,
    end: float,
    days: float = 7.0,
    interval_s: int = 30,
    namespaces: int = 8,
    other_interval_s: int | None = None,
    seed: int = 7,
    min_hours: float = 6.0,
) -> GpuFleet:
    """`jobs` jobs over the `days` before `end`, every sample time a multiple of the job's
    scrape interval: `interval_s`, or for every third job `other_interval_s` where given (a
    fleet scraped by two Prometheus jobs)."""
    rng = random.Random(seed)
    gen = np.random.default_rng(seed)
    fleet = GpuFleet()
    for j in range(jobs):
        every = other_interval_s if other_interval_s and j % 3 == 2 else interval_s
        first = (end - days * 86400 - 7200) // every * every
        last = end // every * every
        namespace = f"team-{j % namespaces:02d}"
        job = f"train-{j:04d}"
        gpus, model = rng.choice(GPU_COUNTS), rng.choice(MODELS)
        mean = rng.uniform(15, 95)
        hours = rng.uniform(min_hours, days * 24 + 2)
        start = rng.uniform(first, last - hours * 3600) // every * every
        stop = start + hours * 3600 // every * every
        restart = rng.random() < 0.3
        spans = [(start, stop)]
        if restart:  # the first pod dies; the next one starts 10 minutes later
            middle = (start + stop) / 2 // every * every
            spans = [(start, middle), (middle + 600, stop)]
        for a, b in spans:
            suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            pod = f"{job}-{suffix}"  # a Job's pod: a new suffix when it restarts
            times = np.arange(a, b + 1, every, dtype=np.int64)
            for g in range(gpus):
                util = np.clip(gen.normal(mean, 12, len(times)), 0, 100).round().astype(np.int64)
                fleet.series.append(GpuSeries(namespace, pod, job, g, model, times, util, every))
    return fleet


def write_openmetrics(fleet: GpuFleet, path: Path) -> None:
    with path.open("w") as out:
        out.write("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n")
        out.write("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
        for s in fleet.series:
            labels = (
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="{s.gpu}",UUID="GPU-{s.pod}-{s.gpu}",'
                f'modelName="{s.model}",namespace="{s.namespace}",pod="{s.pod}"}}'
            )
            out.writelines(
                f"{labels} {u} {t}\n"
                for t, u in zip(s.times.tolist(), s.util.tolist(), strict=True)
            )
        out.write("# EOF\n")


def create_blocks(fleet: GpuFleet, folder: Path) -> Path:
    """The fleet as a Prometheus data folder (folder/data), through promtool."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "gpu-util.om"
    write_openmetrics(fleet, source)
    data = folder / "data"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
         "--quiet", str(source), str(data)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    source.unlink()
    return data


def capture_wastes(runs: list[Path], tmp: Path) -> list[str]:
    """The GPU idle causes of real captures (each run copied into `tmp` and analysed by XProf
    here), as the hub's index keeps them: what the ledger and the explain policy read."""
    from profiler_service.analysis.gpu_waste import capture_waste
    from profiler_service.analysis.summary import analyse_run

    out = []
    for run in runs:
        copy = tmp / run.name
        copy.mkdir(parents=True)
        for path in run.glob("*.xplane.pb"):
            shutil.copy(path, copy / path.name)
        result = analyse_run(copy)
        waste = capture_waste(result.summary, result.findings)
        if waste is not None:
            out.append(waste.model_dump_json(exclude_defaults=True))
    return out
