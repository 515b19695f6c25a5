"""What each tracer configuration costs a real job, and which findings it still supports.

    .venv/bin/python bench/bench_tracers.py [--workloads input-bound compute-bound]
                                            [--rounds 3] [--seconds 4]
                                            [--precision 0.025 --max-rounds 30]

For each workload (the demo job's own dataset and model), a real Keras job trains in this
process with TF's profiler server started, as in a job a sidecar captures. Each round runs one
window per configuration, in an order that rotates round by round:
  - bare:           no capture at all;
  - in-process:     tf.profiler.experimental.start/stop in this process (TF 2.21 applies its
                    defaults whatever the options: host 2, device 1, python 0);
  - agent:          the same through the agent's InProcessCapturer, whose thread collects the
                    trace at stop at a lower priority than the job's threads;
  - h1 / h2 / h3:   the sidecar's capture through gRPC (XProf's client in a child process) at host
                    tracer level 1, 2 (the service's default) and 3, tf.data op tracing on;
  - h2 no-tf.data:  host level 2 with include_dataset_ops off;
  - h2 python:      host level 2 with the Python tracer on.
Per configuration: the job's own wall time per step (a Keras callback) over the capture call
(session start, the trace, the collection at stop), as a ratio to the bare windows by medians and
by minima; XProf's average step time inside the trace (tracing cost alone, no collection) over
bare; the capture's size; where the CPU went, which load on a shared machine disturbs far less
than wall time: the job's training threads per step, TF's profiler server collecting the trace
in the job (its gRPC threads, per capture), the capture client (the child process, per capture),
and all of it per step over the bare job's CPU per step; then what the analysis of the last
round's capture finds: XProf's input classification and input share, the steps it saw, and the
rules that fire. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf
from bench_common import add_rounds_arguments, free_port, paired_interval, record

from profiler_service.analysis.summary import analyse_run
from profiler_service.capture.capturer import CaptureJob
from profiler_service.capture.in_process import InProcessCapturer
from profiler_service.capture.remote import RemoteCapturer
from profiler_service.demo.workloads import build_model, compute_bound_dataset, input_bound_dataset
from profiler_service.models import CaptureOptions
from profiler_service.steps import ProfilerStepCallback
from profiler_service.targets import Target

# name -> (host level, python level, tf.data ops); None: no capture; "in-process": the agent's
CONFIGS: dict[str, tuple[int, int, bool] | str | None] = {
    "bare": None,
    "in-process": "in-process",
    "agent": "agent",
    "h1": (1, 0, True),
    "h2": (2, 0, True),
    "h3": (3, 0, True),
    "h2 no-tf.data": (2, 0, False),
    "h2 python": (2, 1, True),
}


class StepClock(keras.callbacks.Callback):
    """Each step's end, and the end of training once `deadline` has passed."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []
        self.deadline = 0.0

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.ends.append(now)
        if now > self.deadline:
            self.model.stop_training = True

    def per_step(self, start: float, end: float) -> float | None:
        inside = [t for t in self.ends if start <= t <= end]
        return (inside[-1] - inside[0]) / (len(inside) - 1) if len(inside) > 2 else None


@dataclass
class Arm:
    per_step: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    last_run: Path | None = None
    train_cpu_per_step: list[float] = field(default_factory=list)  # the job's other threads
    collect_cpu: list[float] = field(default_factory=list)  # TF's profiler server (gRPC threads)
    client_cpu: list[float] = field(default_factory=list)  # the capture client's process
    cpu_per_step: list[float] = field(default_factory=list)  # all three, per step


PROFILER_SERVER_THREADS = "grpcpp_sync_ser"  # TF's profiler server answers on gRPC's threads


def cpu_by_thread() -> dict[tuple[str, str], float]:
    """CPU seconds of each of this process's threads so far, by (tid, name) (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds[(tid, name)] = (int(fields[11]) + int(fields[12])) / tick
    return seconds


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def capture(config, seconds: float, server: str, logdir: Path) -> list[Path]:
    if config == "in-process":
        tf.profiler.experimental.start(str(logdir))
        time.sleep(seconds)
        tf.profiler.experimental.stop()
        return sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    job = CaptureJob(
        snapshot_id=logdir.name,
        target=Target(name="bench", workers=[server]),
        logdir=logdir,
        attempts=1,
        timeout_s=seconds + 60,
        options=CaptureOptions(
            duration_ms=int(seconds * 1000),
            host_tracer_level=2 if config == "agent" else config[0],
            python_tracer_level=0 if config == "agent" else config[1],
            device_tracer_level=1,
            include_dataset_ops=True if config == "agent" else config[2],
        ),
    )
    if config == "agent":  # on a thread of its own, as the service's controller runs it
        done: dict[str, list[Path]] = {}
        thread = threading.Thread(
            target=lambda: done.update(p=InProcessCapturer().capture(job).paths)
        )
        thread.start()
        thread.join()
        return done["p"]
    return RemoteCapturer().capture(job).paths


def run_workload(
    workload: str, rounds: int, seconds: float, root: Path, precision: float, max_rounds: int
) -> dict[str, Arm]:
    if workload == "input-bound":
        dataset, model = input_bound_dataset(), build_model(width=64)
    else:
        dataset, model = compute_bound_dataset(), build_model(width=1024)
    clock = StepClock()
    callbacks = [ProfilerStepCallback(), clock]
    clock.deadline = time.perf_counter() + 3
    model.fit(dataset, epochs=1, steps_per_epoch=10**9, verbose=0, callbacks=callbacks)  # warm
    port = free_port()
    tf.profiler.experimental.server.start(port)
    arms = {name: Arm() for name in CONFIGS}
    names = list(CONFIGS)
    r = 0
    while r < rounds or (precision > 0 and r < max_rounds and widest(arms) > precision):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            config, logdir = CONFIGS[name], root / f"{workload}-{r}-{name.replace(' ', '-')}"
            window: dict[str, object] = {}

            def capture_now(config=config, logdir=logdir, window=window) -> None:
                time.sleep(0.5)  # the job is training by then
                threads, children = cpu_by_thread(), children_cpu()
                window["start"] = time.perf_counter()
                if config is None:
                    time.sleep(seconds)
                else:
                    window["files"] = capture(config, seconds, f"127.0.0.1:{port}", logdir)
                window["end"] = time.perf_counter()
                window["client"] = children_cpu() - children
                used = cpu_by_thread()
                window["collect"] = sum(
                    t - threads.get(k, 0.0)
                    for k, t in used.items()
                    if k[1].startswith(PROFILER_SERVER_THREADS)
                )
                window["job"] = sum(t - threads.get(k, 0.0) for k, t in used.items())
                clock.deadline = window["end"] + 0.3

            clock.ends.clear()
            clock.deadline = float("inf")
            thread = threading.Thread(target=capture_now)
            thread.start()
            model.fit(dataset, epochs=1, steps_per_epoch=10**9, verbose=0, callbacks=callbacks)
            thread.join()
            per_step = clock.per_step(window["start"], window["end"])
            arm = arms[name]
            if per_step is not None:
                arm.per_step.append(per_step)
                steps = (window["end"] - window["start"]) / per_step
                job, collect, client = window["job"], window["collect"], window["client"]
                arm.train_cpu_per_step.append((job - collect) / steps)
                arm.collect_cpu.append(collect)
                arm.client_cpu.append(client)
                arm.cpu_per_step.append((job + client) / steps)
            files = window.get("files") or []
            arm.sizes.append(sum(p.stat().st_size for p in files))
            if files:
                arm.last_run = files[0].parent
        r += 1
        print(
            f"{workload} round {r}: "
            + ", ".join(
                f"{k} {v.per_step[-1] * 1000:.2f} ms" for k, v in arms.items() if v.per_step
            ),
            flush=True,
        )
    return arms


def widest(arms: dict[str, Arm]) -> float:
    """The widest 95 % half-width of the configurations' paired ratios to bare."""
    bare = arms["bare"].per_step
    return max(paired_interval(a.per_step, bare)[2] for n, a in arms.items() if n != "bare")


def report(workload: str, arms: dict[str, Arm]) -> None:
    bare = arms["bare"].per_step
    base_med, base_min = statistics.median(bare), min(bare)
    base_cpu = statistics.median(arms["bare"].cpu_per_step)
    print(
        f"\n{workload}: bare {base_med * 1000:.2f} ms/step (median; its rounds ranged "
        f"{(max(bare) - min(bare)) / base_med * 100:.0f} % of it), "
        f"{base_cpu * 1000:.2f} ms of CPU a step"
    )
    print(
        f"{'CPU (medians)':<14} {'training/step':>13} {'collection':>10} {'client':>7} "
        f"{'all/step ÷ bare':>15}"
    )
    for name, arm in arms.items():
        if not arm.cpu_per_step:
            continue
        print(
            f"{name:<14} {statistics.median(arm.train_cpu_per_step) * 1000:>10.2f} ms "
            f"{statistics.median(arm.collect_cpu):>8.3f} s "
            f"{statistics.median(arm.client_cpu):>5.3f} s "
            f"{statistics.median(arm.cpu_per_step) / base_cpu:>15.3f}"
        )
    print(
        f"{'config':<14} {'median':>7} {'min':>6} {'in-trace':>8} {'MB':>6} {'XProf input':>17} "
        f"{'steps':>5}  findings"
    )
    for name, arm in arms.items():
        med, low = statistics.median(arm.per_step), min(arm.per_step)
        if arm.last_run is None:
            print(f"{name:<14} {med / base_med:>7.3f} {low / base_min:>6.3f}")
            continue
        run = Path(tempfile.mkdtemp(prefix="bench-tracers-"))
        for p in arm.last_run.glob("*.xplane.pb"):
            shutil.copy(p, run / p.name)
        try:
            result = analyse_run(run)
        finally:
            shutil.rmtree(run, ignore_errors=True)
        s = result.summary
        in_trace = (s.step_time.avg_ms or 0) / 1000 / base_med
        if name == "h2":  # the default; the others are in the benchmark's own output
            for stat, ratio, aim in (
                ("median", med / base_med, 1.10),
                ("min", low / base_min, 1.05),
            ):
                record(
                    f"step time during a remote capture (default levels), {workload} / bare "
                    f"({stat}; bare's own spread {(max(bare) - min(bare)) / base_med * 100:.0f} %)",
                    ratio,
                    f"<= {aim}",
                    ratio <= aim,
                    "x",
                )
        share = s.input_pipeline.input_share  # a share since 0.2.0; shown as a percentage
        verdict = f"{s.input_pipeline.classification.value} {(share or 0) * 100:.0f}%"
        fired = ", ".join(f.rule for f in result.findings) or "none"
        if s.input_pipeline.slowest_stage:
            python = ", Python in it" if s.input_pipeline.python_in_pipeline else ""
            fired += f" (slowest tf.data stage: {s.input_pipeline.slowest_stage}{python})"
        print(
            f"{name:<14} {med / base_med:>7.3f} {low / base_min:>6.3f} {in_trace:>8.3f} "
            f"{statistics.median(arm.sizes) / 2**20:>6.1f} {verdict:>17} "
            f"{s.step_time.count:>5}  {fired}",
            flush=True,
        )
    print("each configuration against bare, round by round (paired): median ratio [95% interval]:")
    for name, arm in arms.items():
        if name != "bare":
            mid, low, half = paired_interval(arm.per_step, bare)
            print(f"  {name:>14}: {mid:.3f} [{low:.3f}, {low + 2 * half:.3f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=["input-bound", "compute-bound"],
        choices=["input-bound", "compute-bound"],
    )
    add_rounds_arguments(parser, rounds=3, max_rounds=30, what="every configuration's")
    parser.add_argument("--seconds", type=float, default=4.0, help="each capture's duration")
    parser.add_argument(
        "--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), help="bare is kept"
    )
    args = parser.parse_args()
    for name in [n for n in CONFIGS if n != "bare" and n not in args.configs]:
        del CONFIGS[name]
    warnings.filterwarnings("ignore")
    root = Path(tempfile.mkdtemp(prefix="bench-tracers-"))
    try:
        results = {
            w: run_workload(w, args.rounds, args.seconds, root, args.precision, args.max_rounds)
            for w in args.workloads
        }
        for workload, arms in results.items():
            report(workload, arms)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        "\nratios to bare: median/min = the job's wall time per step over the whole capture call "
        "(start, trace, collection); in-trace = XProf's average step inside the trace. "
        f"{os.cpu_count()} cores, load " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )


if __name__ == "__main__":
    main()
