"""What sampling the job's Python stacks costs it: step time with and without the agent's stack
sampler (probes/python_stacks.py), side by side in one run.

    .venv/bin/python bench/bench_stacks.py [--blocks 120] [--block-steps 25] [--hz 50 100]
    .venv/bin/python bench/bench_stacks.py --py-spy      # the sidecar's py-spy instead, 50 Hz

Two real jobs train in this process:
  - fit:   Keras `fit` over a tf.data pipeline (a parallel map, batch, prefetch) into a 3-layer
           MLP, as bench_overhead.py: most of a step runs in TensorFlow's C++ code;
  - eager: a custom loop of tiny ops run eagerly (the demo's eager workload): Python holds the
           GIL most of each step, so a sampler that needs the GIL costs it most.
Each job trains without a break while the sampler (`StackSampler(hz)`, as the agent runs it
around a trace) is started and stopped every `--block-steps` steps, in blocks ordered bare,
sampled, sampled, bare, ... so that each pair of neighbouring blocks holds one of each and drift
(other load, thermal) hits both alike; a pair's ratio is its sampled block's mean step time over
its bare block's (a step's time: from one step's end to the next; the step right after a start
or stop is left out). Printed: each job's median step time in each arm, the median of the pairs'
ratios with its 95 % bootstrap interval, and what one thread's sample costs on the sampler's
thread (its time holding the GIL), at each rate of `--hz` (the agent's default and twice it).
Aim: at the default rate, sampled within 2 % of bare (issue 49). Nothing is asserted.

`--py-spy`: the sampler is the sidecar's instead, `py-spy record --nonblocking` against this
process (probes/py_spy.py, as the sidecar runs it beside a trace; root, or SYS_PTRACE): it reads
the job's memory from its own process, so what it costs the job is the CPU it takes from it
(on this 2-core machine, a core the job's threads would use) and its attach. Its blocks are
longer (`--py-spy-block-s`, in seconds): py-spy takes a few hundred ms to attach.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_common import paired_interval, record
from bench_overhead import dataset

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from profiler_service.demo.workloads import FEATURES, build_model
from profiler_service.probes.py_spy import start_recording
from profiler_service.probes.python_stacks import DEFAULT_HZ, StackSampler
from profiler_service.steps import ProfilerStepCallback

AIM = 1.02  # sampled / bare

Train = Callable[[int, Callable[[], None]], None]  # (steps, called after each step)


def fit_job(width: int) -> Train:
    ds = dataset()
    model = build_model(width=width)
    model.fit(ds, epochs=1, steps_per_epoch=100, verbose=0)  # trace, warm up, fill the prefetch

    class AfterStep(tf.keras.callbacks.Callback):
        def __init__(self, after: Callable[[], None]):
            super().__init__()
            self.after = after

        def on_train_batch_end(self, batch, logs=None):
            self.after()

    def train(steps: int, after: Callable[[], None]) -> None:
        model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0,
                  callbacks=[ProfilerStepCallback(), AfterStep(after)])  # fmt: skip

    return train


def eager_job() -> Train:
    x = tf.random.normal((8, FEATURES))
    w = tf.Variable(tf.random.normal((FEATURES, FEATURES)))

    def train_step() -> None:
        for _ in range(20):
            y = tf.nn.relu(tf.matmul(x, w)) + 1.0
            w.assign_sub(0.0001 * tf.reduce_mean(y) * tf.ones_like(w))

    train_step()

    def train(steps: int, after: Callable[[], None]) -> None:
        for _ in range(steps):
            train_step()
            after()

    return train


class PySpySampler:
    """py-spy against this process, started and stopped as the agent's sampler is."""

    def __init__(self, hz: float, scratch: Path):
        self.hz, self.scratch = hz, scratch
        self.recording = None
        self.samples = self.sampling_ns = self.ticks = 0

    def start(self) -> None:
        self.recording = start_recording(self.hz, [], os.getpid(), self.scratch)
        if self.recording.unavailable:
            raise SystemExit(f"py-spy: {self.recording.unavailable}")

    def stop(self) -> None:
        out = self.scratch / "out"
        out.mkdir(exist_ok=True)
        self.recording.finish(out)
        folded = out / "python.stacks.folded"
        if not folded.is_file():
            raise SystemExit(f"py-spy sampled nothing: {(out / 'python.samples.json').read_text()}")
        self.samples = sum(int(line.rsplit(" ", 1)[1]) for line in folded.read_text().splitlines())


@dataclass
class Blocks:
    """One job's run: each block's step times, and whether the sampler ran through it."""

    hz: float
    block_steps: int
    blocks: int
    make: Callable[[float], StackSampler | PySpySampler] = StackSampler
    times: list[list[float]] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)
    sample_us: list[float] = field(default_factory=list)  # one thread's sample, per block
    ticks: list[int] = field(default_factory=list)

    def run(self, train: Train) -> None:
        sampler: StackSampler | PySpySampler | None = None
        last = time.perf_counter()
        steps = 0

        def after() -> None:
            nonlocal last, steps, sampler
            now = time.perf_counter()
            block = steps // self.block_steps
            if steps % self.block_steps:  # the first step of a block holds the switch
                self.times[block].append(now - last)
            steps += 1
            if steps % self.block_steps == 0:  # the block ends: switch for the next one
                if sampler is not None:
                    sampler.stop()
                    self.sample_us.append(sampler.sampling_ns / 1000 / max(1, sampler.samples))
                    self.ticks.append(sampler.ticks)
                    sampler = None
                if steps < self.blocks * self.block_steps and self.state(block + 1):
                    sampler = self.make(self.hz)
                    sampler.start()
                if block + 1 < self.blocks:
                    self.times.append([])
                    self.sampled.append(self.state(block + 1))
            last = time.perf_counter()

        self.times, self.sampled = [[]], [self.state(0)]
        train(self.blocks * self.block_steps, after)

    @staticmethod
    def state(block: int) -> bool:
        """bare, sampled, sampled, bare, bare, sampled, ...: each pair (2k, 2k+1) holds both."""
        return (block % 4) in (1, 2)

    def arms(self) -> tuple[list[float], list[float]]:
        """Each pair's sampled and bare block means, pair by pair."""
        sampled, bare = [], []
        for k in range(0, len(self.times) - 1, 2):
            pair = {self.sampled[k]: self.times[k], self.sampled[k + 1]: self.times[k + 1]}
            sampled.append(statistics.fmean(pair[True]))
            bare.append(statistics.fmean(pair[False]))
        return sampled, bare


def main_py_spy(args: argparse.Namespace) -> None:
    """Each job's steps with py-spy at the agent's default rate against none, side by side."""
    warnings.filterwarnings("ignore")
    makers = {"fit": lambda: fit_job(args.width), "eager": eager_job}
    blocks = max(8, args.blocks // 10)
    print(f"per job {blocks + blocks % 2} blocks of about {args.py_spy_block_s:g} s, bare and "
          f"py-spy at {DEFAULT_HZ:g} Hz in turn", flush=True)  # fmt: skip
    print(f"{'job':>6} {'bare ms':>9} {'py-spy ms':>10} {'paired ratio [95%]':>26}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.jobs:
            train = makers[name]()
            step_s = _step_s(train)
            steps = max(50, round(args.py_spy_block_s / step_s))
            run = Blocks(
                DEFAULT_HZ, steps, blocks + blocks % 2, lambda hz: PySpySampler(hz, Path(tmp))
            )
            run.run(train)
            sampled, bare = run.arms()
            mid, low, half = paired_interval(sampled, bare)
            print(f"{name:>6} {statistics.median(bare) * 1000:>9.3f} "
                  f"{statistics.median(sampled) * 1000:>10.3f} "
                  f"{mid:>11.3f} [{low:.3f}, {low + 2 * half:.3f}]", flush=True)  # fmt: skip
            record(f"step time, {name} job, py-spy at {DEFAULT_HZ:g} Hz / bare (paired median)",
                   mid, f"<= {AIM}", mid <= AIM, "x")  # fmt: skip
    print(f"aim: py-spy <= {AIM} x bare. Load average now {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")  # fmt: skip


def _step_s(train: Train) -> float:
    """A step's time, from 30 steps."""
    marks: list[float] = []
    train(30, lambda: marks.append(time.perf_counter()))
    return (marks[-1] - marks[0]) / (len(marks) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=120, help="blocks per job and rate (even)")
    parser.add_argument("--block-steps", type=int, default=25, help="steps per block")
    parser.add_argument("--width", type=int, default=256, help="fit: hidden layer width")
    parser.add_argument(
        "--hz", type=float, nargs="+", default=[DEFAULT_HZ, 2 * DEFAULT_HZ],
        help="the sampler's rates, each measured against bare on its own (the agent's default: "
        f"{DEFAULT_HZ:g})",
    )  # fmt: skip
    parser.add_argument("--jobs", nargs="+", choices=["fit", "eager"], default=["fit", "eager"])
    parser.add_argument("--py-spy", action="store_true", help="the sidecar's py-spy, not the agent")
    parser.add_argument("--py-spy-block-s", type=float, default=3.0, help="py-spy: block length")
    args = parser.parse_args()
    if args.py_spy:
        return main_py_spy(args)
    warnings.filterwarnings("ignore")
    logging.getLogger("profiler_service").setLevel(logging.ERROR)
    makers = {"fit": lambda: fit_job(args.width), "eager": eager_job}

    print(f"per job and rate {args.blocks} blocks of {args.block_steps} steps, bare and sampled "
          "in turn", flush=True)  # fmt: skip
    print(f"{'job':>6} {'Hz':>5} {'bare ms':>9} {'sampled ms':>11} {'paired ratio [95%]':>26}")
    for name in args.jobs:
        train = makers[name]()
        for hz in args.hz:
            run = Blocks(hz, args.block_steps, args.blocks + args.blocks % 2)
            run.run(train)
            sampled, bare = run.arms()
            mid, low, half = paired_interval(sampled, bare)
            print(
                f"{name:>6} {hz:>5g} {statistics.median(bare) * 1000:>9.3f} "
                f"{statistics.median(sampled) * 1000:>11.3f} "
                f"{mid:>11.3f} [{low:.3f}, {low + 2 * half:.3f}]"
            )
            record(
                f"step time, {name} job, Python stacks at {hz:g} Hz / bare (paired median)",
                mid,
                f"<= {AIM}" if hz == DEFAULT_HZ else "",
                mid <= AIM if hz == DEFAULT_HZ else None,
                "x",
            )
            bare_spread = statistics.pstdev(bare) / statistics.fmean(bare) * 100
            print(
                f"{'':>12} {statistics.median(run.ticks):.0f} ticks per sampled block; one "
                f"thread's sample {statistics.median(run.sample_us):.1f} us on the sampler's "
                f"thread; the bare blocks' own spread (stdev) {bare_spread:.1f} %",
                flush=True,
            )
    print(f"aim: sampled <= {AIM} x bare. Load average now {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
