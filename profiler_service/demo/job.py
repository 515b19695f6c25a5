"""A small real TF job: input-bound (Python decoding, as in the article), compute-bound, eager,
multi-worker, or memory (the article's second case: activations kept across steps, toward an OOM).

    python -m profiler_service.demo.job --workload input-bound --agent --store ./profiles
    python -m profiler_service.demo.job --workload compute-bound --profiler-port 6009
    python -m profiler_service.demo.job --workload memory --leak-kb-per-step 512 --oom-growth-mb 800
    python -m profiler_service.demo.job --workload function --arg python-number  # retracing
    python -m profiler_service.demo.job --workload function --arg new-shapes --jit-compile
    python -m profiler_service.demo.job --workload pipeline --pipeline sequential
    python -m profiler_service.demo.job --workload temporaries --temporaries-mb 64
    python -m profiler_service.demo.job --workload xla-fit --batches varying

The function, pipeline and temporaries workloads are in tf_pathologies.py.

Prints one line `READY {json}` once training has started (with the agent's URL when embedded),
then trains until --seconds pass or it is stopped. With --agent, the agent starts before
TensorFlow is imported (the workloads are in workloads.py), as a job's own script should start
it: it then turns on the CPU allocator's memory events (agent.record_memory_events).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profiler_service.agent import Agent

WORKLOADS = (
    "input-bound",
    "compute-bound",
    "eager",
    "multi-worker",
    "memory",
    "function",
    "pipeline",
    "temporaries",
    "xla-fit",
)
# tf_pathologies.py's workloads: what each is called with.
PIPELINE_KINDS = ("sequential", "tuned", "augment-after-decode", "deterministic")
FUNCTION_ARGS = ("tensor", "python-number", "new-shapes")


def build_parser() -> argparse.ArgumentParser:
    """The job's command line; building it imports no TensorFlow."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="input-bound",
    )
    parser.add_argument("--seconds", type=float, default=600, help="stop training after this long")
    parser.add_argument("--profiler-port", type=int, help="start TF's profiler server on this port")
    parser.add_argument("--agent", action="store_true", help="embed the profiler agent")
    parser.add_argument("--agent-port", type=int, default=0, help="agent port (0: any free port)")
    parser.add_argument("--store", default="./profiles", help="agent's snapshot store")
    parser.add_argument("--decode-ms", type=float, default=2.0, help="input-bound: ms per record")
    parser.add_argument(
        "--fixed",
        action="store_true",
        help="input-bound, eager: the fixed twin, as the finding advises (a parallel, prefetched "
        "pipeline; the step in a tf.function)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="input-bound: records per step (more work per step, counted, whatever the load)",
    )
    parser.add_argument(
        "--slow-down",
        nargs=2,
        type=float,
        metavar=("AFTER_S", "DECODE_MS"),
        help="input-bound: decode this slowly from AFTER_S seconds on (a step time that jumps)",
    )
    parser.add_argument("--extra-matmuls", type=int, default=0, help="multi-worker: extra work")
    parser.add_argument(
        "--steps-per-execution", type=int, default=1, help="fit: Keras steps per train call"
    )
    parser.add_argument("--clock-file", help="fit: append `time_ns steps` after every call")
    memory = parser.add_argument_group("memory workload")
    memory.add_argument("--leak-kb-per-step", type=float, default=0, help="activation kept")
    memory.add_argument("--resident-mb", type=float, default=0, help="steady footprint held")
    memory.add_argument("--scratch-mb", type=float, default=0, help="temporary freed each step")
    memory.add_argument("--step-ms", type=float, default=20, help="host time per step")
    memory.add_argument("--oom-growth-mb", type=float, default=0, help="die (137) past this growth")
    memory.add_argument("--stats-file", help="append the job's own figures each second")
    group = parser.add_argument_group("function, pipeline and temporaries workloads")
    group.add_argument("--arg", choices=FUNCTION_ARGS, default="tensor", help="function: argument")
    group.add_argument("--jit-compile", action="store_true", help="function: compile with XLA")
    group.add_argument("--reduce-retracing", action="store_true", help="function: one trace")
    group.add_argument("--pipeline", choices=PIPELINE_KINDS, default="sequential")
    group.add_argument("--temporaries-mb", type=float, default=64, help="temporaries per step")
    group.add_argument("--batches", choices=("varying", "fixed"), default="varying")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    ready: dict = {"pid": os.getpid()}
    # The agent first, then TensorFlow, as a job's own script should start it. A stand-in OOM
    # limit (--oom-growth-mb) is the size before training plus the growth, read once TensorFlow
    # is in: there the agent starts after it, and the job sets the memory events itself.
    embedded = _start_agent(args, ready) if args.agent and not args.oom_growth_mb else None
    import tensorflow as tf

    from profiler_service.demo import workloads

    workloads.DECODE_S = args.decode_ms / 1000
    if args.slow_down:
        after_s, slower_ms = args.slow_down

        def slow_down() -> None:
            workloads.DECODE_S = slower_ms / 1000

        threading.Timer(after_s, slow_down).start()
        ready["slow_down_at"] = time.time() + after_s
    if args.profiler_port:
        tf.profiler.experimental.server.start(args.profiler_port)
        ready["profiler_port"] = args.profiler_port
    if args.workload == "memory" and args.oom_growth_mb:
        import psutil

        ready["oom_at_bytes"] = psutil.Process().memory_info().rss + int(args.oom_growth_mb * 2**20)
    if args.agent and embedded is None:  # the memory watch reads the stand-in limit as a cgroup's
        _start_agent(args, ready, memory_watch_capacity_bytes=ready.get("oom_at_bytes"))
    workloads.run(args, ready)


def _start_agent(args: argparse.Namespace, ready: dict, **settings: int | None) -> Agent:
    """Embed the agent (its URL goes in `ready`); the job does not train without it."""
    from profiler_service import agent

    limits = {name: value for name, value in settings.items() if value is not None}
    embedded = agent.start(port=args.agent_port, store=args.store, **limits)
    if embedded is None:
        sys.exit(f"the profiler agent did not start on the store {args.store}")
    ready["agent_url"] = embedded.url
    return embedded


if __name__ == "__main__":
    main()
