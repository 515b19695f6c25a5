"""The regression gate at the user's threshold, on real captures: how often two captures of an
unchanged job are flagged (A/A), how often a job made 10 % slower by counted extra work is
caught, with the step change's interval from the captures' own steps alone, widened by the
noise between captures the job's untraced steps show (analysis/across/capture_noise.py), or by the
assumed default; and by two decision rules.

Every capture is of a fresh job, so A/A and slowed pairs are of the same kind (both restart,
as a deploy does): the calibration family's job (bench/calibration/job.py) decoding each
element in Python with a 1 ms wait, `BASE_BATCH` elements a step, or 10 % more (`--slower`).
Its embedded agent samples the job's step time each second before the capture (the look-back).

    .venv/bin/python bench/bench_verification.py [--pairs 20] [--threshold 0.05]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

from bench_calibration import capture
from bench_common import record

from profiler_service.analysis.across.capture_noise import BETWEEN_CAPTURES_SD, between_captures_sd
from profiler_service.analysis.across.verification import StepChange, step_change
from profiler_service.models import Snapshot

BASE_BATCH = 40
JOB = {"decode": "python-sleep", "sleep-ms": 1.0, "width": 64, "cores": 2}


def captures(batch: int, n: int, tmp: Path, warm_s: float) -> list[Snapshot]:
    """`n` captures, each of a fresh job decoding `batch` elements a step."""
    config = {**JOB, "batch": batch}
    return [
        Snapshot.model_validate(capture(config, "", tmp / f"{batch}-{i}", warm_s)) for i in range(n)
    ]


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
    parser.add_argument("--keep", type=Path, help="write the captures here (JSON)")
    parser.add_argument("--from-kept", type=Path, help="report on captures kept by --keep")
    args = parser.parse_args()
    if args.from_kept:
        kept = json.loads(args.from_kept.read_text())
        base = [Snapshot.model_validate(s) for s in kept["base"]]
        slowed = {float(e): [Snapshot.model_validate(s) for s in ss]
                  for e, ss in kept["slowed"].items()}  # fmt: skip
    else:
        with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
            base = captures(BASE_BATCH, 2 * args.pairs, Path(tmp), args.warm_s)
            slowed = {
                e: captures(round(BASE_BATCH * (1 + e)), args.pairs, Path(tmp), args.warm_s)
                for e in args.slower
            }
    if args.keep:
        fields = ("id", "target", "capture", "created_at", "capture_started_at", "lead_up")
        slim = {"include": {**dict.fromkeys(fields, True), "summary": {"step_time": True}}}
        args.keep.write_text(json.dumps({
            "base": [s.model_dump(mode="json", **slim) for s in base],
            "slowed": {str(e): [s.model_dump(mode="json", **slim) for s in ss]
                       for e, ss in slowed.items()},
        }))  # fmt: skip
    arms = {"A/A": list(zip(base[::2], base[1::2], strict=True))}
    arms |= {f"+{e:.0%} work": list(zip(base[::2], s, strict=False)) for e, s in slowed.items()}
    aa = [math.log(b.summary.step_time.avg_ms / a.summary.step_time.avg_ms) for a, b in arms["A/A"]]
    between = statistics.stdev(aa) / math.sqrt(2)
    looked = statistics.median(between_captures_sd([s])[0] for s in base)
    print(f"base job: step {statistics.fmean(s.summary.step_time.avg_ms for s in base):.2f} ms; "
          f"between fresh captures, log sd {between:.3f} (A/A); the look-back's, median "
          f"{looked:.3f}; assumed {BETWEEN_CAPTURES_SD}")  # fmt: skip
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
                        record(f"A/A flagged at {args.threshold:.0%}", 100 * share, "<= 1 %",
                               share <= 0.01, "%")  # fmt: skip
                    elif name == "+10% work":
                        record(f"10 % slower caught at {args.threshold:.0%}", 100 * share,
                               ">= 95 %", share >= 0.95, "%")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
