"""The regression gate at the user's threshold, on real captures: how often two captures of an
unchanged job are flagged (A/A), how often a job made 10 % slower is caught, with the step
change's interval from the captures' own steps alone, widened by the noise between captures the
job's untraced steps show (across/capture_noise.py), or by the assumed default; and by
two decision rules.

A/A and slowed pairs are of one kind (`--kind`), on the calibration family's job
(bench/calibration/job.py) decoding each element in Python with a 1 ms wait, `BASE_BATCH`
elements a step; its embedded agent samples the job's step time each second (the look-back):
  restart       every capture of a fresh job, as a deploy does; the slowed job decodes 10 % more
                elements a step (`--slower`);
  same-process  both captures of one job, `--gap-s` apart; the slowed job waits 10 % longer an
                element from between its two captures on (a slower reader, a noisy neighbour).

    .venv/bin/python bench/bench_verification.py [--kind same-process] [--pairs 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench_calibration import capture_ready, job_args, started_job
from bench_common import record

from profiler_service.across.capture_noise import BETWEEN_CAPTURES_SD, between_captures_sd
from profiler_service.across.verification import step_change
from profiler_service.models import Snapshot
from profiler_service.verification_record import StepChange

BASE_BATCH = 40
JOB = {"decode": "python-sleep", "sleep-ms": 1.0, "width": 64, "cores": 2}


@contextlib.contextmanager
def running_job(config: dict, store: Path, warm_s: float,
                extra: tuple[str, ...] = ()) -> Iterator[Callable[[], Snapshot]]:  # fmt: skip
    """A fresh job of `config`, `warm_s` into its training: yields a function that takes a 2 s
    capture of it through its agent."""
    with started_job(config, [*job_args(config), *extra], store) as (_, url):
        time.sleep(warm_s)  # the clock's lines wait in the pipe: nobody reads them
        yield lambda: Snapshot.model_validate(capture_ready(url))


def restart_pairs(n: int, slower: list[float], tmp: Path, warm_s: float) -> dict:
    """A/A: pairs of fresh jobs; slowed: a fresh job of the base beside one decoding more."""

    def fresh(batch: int, name: str) -> Snapshot:
        with running_job({**JOB, "batch": batch}, tmp / name, warm_s) as take:
            return take()

    base = [fresh(BASE_BATCH, f"base-{i}") for i in range(2 * n)]
    arms = {"A/A": list(zip(base[::2], base[1::2], strict=True))}
    for e in slower:
        slowed = [fresh(round(BASE_BATCH * (1 + e)), f"slow-{e}-{i}") for i in range(n)]
        arms[f"+{e:.0%} work"] = list(zip(base[::2], slowed, strict=True))
    return arms


def same_process_pairs(n: int, slower: list[float], tmp: Path, warm_s: float,
                       gap_s: float) -> dict:  # fmt: skip
    """Each pair two captures of one job, `gap_s` apart; in a slowed pair the job waits longer
    an element from just after the first capture on."""

    def pair(name: str, by: float) -> tuple[Snapshot, Snapshot]:
        switch = tmp / f"{name}.slower"
        extra = ("--slower-file", str(switch), "--slower-by", str(by)) if by else ()
        with running_job({**JOB, "batch": BASE_BATCH}, tmp / name, warm_s, extra) as take:
            first = take()
            if by:
                switch.touch()
            time.sleep(gap_s)
            return first, take()

    arms = {"A/A": [pair(f"aa-{i}", 0.0) for i in range(n)]}
    for e in slower:
        arms[f"+{e:.0%} work"] = [pair(f"slow-{e}-{i}", e) for i in range(n)]
    return arms


def change(a: Snapshot, b: Snapshot, noise: str, seed: str) -> StepChange:
    if noise == "steps":
        return step_change(a.summary, b.summary, seed)
    if noise == "look-back":
        sd, source = between_captures_sd([a, b])
        return step_change(a.summary, b.summary, seed, sd, source)
    return step_change(a.summary, b.summary, seed, BETWEEN_CAPTURES_SD, "assumed")


def flagged(c: StepChange, threshold: float, rule: str) -> bool:
    if c.change_interval_95 is None or c.change_share is None:
        return False
    if rule == "interval above":  # the whole interval past the threshold
        return c.change_interval_95[0] > threshold
    return c.change_share > threshold and c.change_interval_95[0] > 0  # past it, beyond noise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20, help="A/A pairs, and slowed pairs")
    parser.add_argument("--threshold", type=float, default=0.05, help="the gate's threshold")
    parser.add_argument("--warm-s", type=float, default=12.0, help="look-back before a capture")
    parser.add_argument("--slower", type=float, nargs="+", default=[0.10], help="slowdowns")
    parser.add_argument("--kind", choices=("restart", "same-process"), default="restart")
    parser.add_argument("--gap-s", type=float, default=12.0, help="same-process: between")
    parser.add_argument("--keep", type=Path, help="write the captures here (JSON)")
    parser.add_argument("--from-kept", type=Path, help="report on captures kept by --keep")
    args = parser.parse_args()
    if args.from_kept:
        kept = json.loads(args.from_kept.read_text())
        if "arms" not in kept:  # written before --kind: the restart kind's base and slowed
            base = [Snapshot.model_validate(s) for s in kept["base"]]
            arms = {"A/A": list(zip(base[::2], base[1::2], strict=True))}
            arms |= {f"+{float(e):.0%} work": list(zip(base[::2], [Snapshot.model_validate(s)
                     for s in ss], strict=False)) for e, ss in kept["slowed"].items()}  # fmt: skip
        else:
            arms = {name: [tuple(Snapshot.model_validate(s) for s in p) for p in pairs]
                    for name, pairs in kept["arms"].items()}  # fmt: skip
    else:
        with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
            if args.kind == "restart":
                arms = restart_pairs(args.pairs, args.slower, Path(tmp), args.warm_s)
            else:
                arms = same_process_pairs(args.pairs, args.slower, Path(tmp), args.warm_s,
                                          args.gap_s)  # fmt: skip
    if args.keep:
        fields = ("id", "target", "capture", "created_at", "capture_started_at", "lead_up")
        slim = {"include": {**dict.fromkeys(fields, True), "summary": {"step_time": True}}}
        args.keep.write_text(json.dumps({"kind": args.kind, "arms": {
            name: [[s.model_dump(mode="json", **slim) for s in p] for p in pairs]
            for name, pairs in arms.items()}}))  # fmt: skip
    base = [s for p in arms["A/A"] for s in p]
    aa = [math.log(b.summary.step_time.avg_ms / a.summary.step_time.avg_ms) for a, b in arms["A/A"]]
    between = statistics.stdev(aa) / math.sqrt(2)
    looked = statistics.median(between_captures_sd([s])[0] for s in base)
    step = statistics.fmean(s.summary.step_time.avg_ms for s in base)
    print(f"{args.kind}: base job: step {step:.2f} ms; between its captures, log sd "
          f"{between:.3f} (A/A); the look-back's, median {looked:.3f}; assumed "
          f"{BETWEEN_CAPTURES_SD}")  # fmt: skip
    print(f"\nthreshold {args.threshold:.0%}")
    print("| pairs | n | real change (median) | noise | rule | flagged |")
    print("|---|---:|---:|---|---|---:|")
    for name, pairs in arms.items():
        real = statistics.median(b.summary.step_time.avg_ms / a.summary.step_time.avg_ms - 1
                                 for a, b in pairs)  # fmt: skip
        for noise in ("steps", "look-back", "assumed"):
            for rule in ("interval above", "past and beyond noise"):
                share = statistics.fmean(
                    flagged(change(a, b, noise, str(i)), args.threshold, rule)
                    for i, (a, b) in enumerate(pairs)
                )
                print(f"| {name} | {len(pairs)} | {real:+.1%} | {noise} | {rule} | {share:.0%} |")
                if noise == "look-back" and rule == "past and beyond noise":
                    if name == "A/A":
                        record(f"{args.kind}: A/A flagged at {args.threshold:.0%}", 100 * share,
                               "<= 1 %", share <= 0.01, "%")  # fmt: skip
                    elif name == "+10% work":
                        record(f"{args.kind}: 10 % slower caught at {args.threshold:.0%}",
                               100 * share, ">= 95 %", share >= 0.95, "%")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
