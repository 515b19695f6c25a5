"""What the calibration family's jobs share (job.py, step_job.py): their common arguments, the
agent embedded before TensorFlow starts, and the job's own clock of its steps."""

from __future__ import annotations

import argparse
import json
import os
import time


def add_job_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--cores", type=int, default=0, help="pin to this many cores (0: all)")
    parser.add_argument("--store", required=True)
    parser.add_argument("--seconds", type=float, default=120)


def start_agent(args: argparse.Namespace):
    """Pin the job to `--cores`, then embed the agent: before TensorFlow is imported, so the
    agent turns its events on and TensorFlow sizes its pools by the pinned cores."""
    if args.cores:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.cores])
    from profiler_service import agent

    return agent.start(port=0, store=args.store)


class StepClock:
    """Says READY (with the agent's URL) after the first step, then each second "CLOCK steps
    seconds": the steps the job's own clock counted, the step time without a profiler."""

    def __init__(self, agent_url: str) -> None:
        self.agent_url = agent_url
        self.said = False
        self.window_start = 0.0
        self.steps = 0

    def tick(self) -> None:
        """Call at the end of every step."""
        now = time.monotonic()
        if not self.said:
            print("READY " + json.dumps({"agent_url": self.agent_url}), flush=True)
            self.said, self.window_start = True, now
            return
        self.steps += 1
        if now - self.window_start >= 1.0:
            print(f"CLOCK {self.steps} {now - self.window_start:.6f}", flush=True)
            self.window_start, self.steps = now, 0
