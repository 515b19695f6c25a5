"""What recording memory events costs the job: step time with the variables that turn TensorFlow's
CPU allocator events on, against the default of a CPU without AVX-512.

TensorFlow 2.21 turns oneDNN on by default only on CPUs with AVX-512 VNNI/BF16 or AMX; without it
(`TF_ENABLE_ONEDNN_OPTS=0` here, the condition of an AMD EPYC or an older Intel) the default CPU
allocator records no `MemoryAllocation` events and the memory analysis is blind. The two ways to
get them back, measured against that baseline in the same run, each job a fresh process, the
conditions interleaved round by round:

- `TF_CPU_ALLOCATOR_USE_BFC=true`: the BFC allocator for the CPU, oneDNN still off;
- `TF_ENABLE_ONEDNN_OPTS=1`: oneDNN on (its allocator records them, not for every job), which
  also changes which kernels run: on a CPU without AVX-512 its effect on speed is the CPU's,
  not measured here;
- both: what the agent makes of a job on a CPU with AVX-512 (it sets the first).

Each job is a Keras MLP (the demo's compute-bound model, 512 rows a step, widths 64, 256 and
1024: from many small allocations per unit of work to few large ones); the figure is the median
step time over `--steps` steps after a warm-up, and whether the allocator recorded events in a
10-step trace.

    .venv/bin/python bench/bench_allocator_events.py [--rounds 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from bench_common import record

CONDITIONS = {
    "no AVX-512 default (TF_ENABLE_ONEDNN_OPTS=0)": {"TF_ENABLE_ONEDNN_OPTS": "0"},
    "+ TF_CPU_ALLOCATOR_USE_BFC=true": {
        "TF_ENABLE_ONEDNN_OPTS": "0",
        "TF_CPU_ALLOCATOR_USE_BFC": "true",
    },
    "TF_ENABLE_ONEDNN_OPTS=1": {"TF_ENABLE_ONEDNN_OPTS": "1"},
    "TF_ENABLE_ONEDNN_OPTS=1 + TF_CPU_ALLOCATOR_USE_BFC=true": {
        "TF_ENABLE_ONEDNN_OPTS": "1",
        "TF_CPU_ALLOCATOR_USE_BFC": "true",
    },
}
BASELINE = next(iter(CONDITIONS))

JOB = r"""
import glob, json, resource, statistics, sys, tempfile, time
import tensorflow as tf
from profiler_service.demo.workloads import build_model, compute_bound_dataset

width, steps = int(sys.argv[1]), int(sys.argv[2])
model = build_model(width)
it = iter(compute_bound_dataset(512))
for _ in range(20):
    model.train_on_batch(*next(it))
times = []
for _ in range(steps):
    t = time.perf_counter()
    model.train_on_batch(*next(it))
    times.append(time.perf_counter() - t)
logdir = tempfile.mkdtemp()
tf.profiler.experimental.start(logdir)
for _ in range(10):
    model.train_on_batch(*next(it))
tf.profiler.experimental.stop()
data = open(glob.glob(logdir + "/**/*.xplane.pb", recursive=True)[0], "rb").read()
print(json.dumps({"median_ms": 1000 * statistics.median(times),
                  "events": b"MemoryAllocation" in data,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

WIDTHS = [64, 256, 1024]


def run(width: int, steps: int, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", JOB, str(width), str(steps)],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    medians: dict[tuple, list[float]] = {}
    events: dict[tuple, bool] = {}
    rss: dict[tuple, list[float]] = {}
    for _ in range(args.rounds):
        for width in WIDTHS:
            for name, env in CONDITIONS.items():
                got = run(width, args.steps, env)
                medians.setdefault((width, name), []).append(got["median_ms"])
                events[(width, name)] = got["events"]
                rss.setdefault((width, name), []).append(got["peak_rss_mb"])
    print(
        "| job | condition | memory events | step ms (median of rounds) | ratio to default "
        "| peak RSS MB |"
    )
    print("|---|---|---|---:|---:|---:|")
    for width in WIDTHS:
        base = statistics.median(medians[(width, BASELINE)])
        for name in CONDITIONS:
            key = (width, name)
            ms = statistics.median(medians[key])
            ratio = ms / base
            print(
                f"| MLP {width} | {name} | {'yes' if events[key] else 'none'} "
                f"| {ms:.2f} | {ratio:.3f} | {statistics.median(rss[key]):.0f} |"
            )
            if name == "+ TF_CPU_ALLOCATOR_USE_BFC=true":
                record(f"step time with the BFC allocator ÷ without, MLP {width}", ratio,
                       aim="<= 1.05x", met=ratio <= 1.05)  # fmt: skip
        both = statistics.median(medians[(width, list(CONDITIONS)[3])])
        onednn = statistics.median(medians[(width, list(CONDITIONS)[2])])
        print(f"| MLP {width} | oneDNN on: with BFC ÷ without | | | {both / onednn:.3f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
