"""The regression gate's statistics on real captures: how often two captures of an unchanged job
flag a regression (A/A), how often a job made 5 % and 10 % slower by counted extra work is
caught, by the step-time change's 95 % interval (analysis/verification.py) against a bare ratio.

The job is the demo's input-bound one: each step decodes `--batch-size` records in Python at
2 ms each, so 42 and 44 records a step against 40 are 5 % and 10 % more counted work (the
step's fixed part makes them a little less). Captures of 2 s go through a real sidecar, one
after the other; A/A pairs are consecutive captures of one job, A/B pairs a capture of the base
job and one of the slower job, started afresh as a redeploy would.

    .venv/bin/python bench/bench_verification.py [--pairs 50] [--slow-pairs 25]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
from bench_common import free_port, record, start_job, start_service

from profiler_service.analysis.models import Summary
from profiler_service.analysis.verification import step_change

BASE_RECORDS = 40
THRESHOLDS = (0.0, 0.02, 0.05)


def captures(url: str, port: int, records: int, n: int) -> list[Summary]:
    """`n` captures of a fresh job decoding `records` a step."""
    job = start_job(port, "input-bound", 3600, "--batch-size", str(records))
    found = []
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            for _ in range(n):
                body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
                if body.get("status") == "ready" and body.get("summary"):
                    found.append(Summary.model_validate(body["summary"]))
    finally:
        job.kill()
        job.wait()
    return found


def flagged(pairs: list[tuple[Summary, Summary]], threshold: float) -> tuple[float, float]:
    """Shares of pairs flagged: by the interval's low end, and by the bare ratio."""
    by_interval = by_ratio = 0
    for i, (a, b) in enumerate(pairs):
        change = step_change(a, b, seed=str(i))
        if change.change_interval_95 and change.change_interval_95[0] > threshold:
            by_interval += 1
        if change.change_share is not None and change.change_share > threshold:
            by_ratio += 1
    return by_interval / len(pairs), by_ratio / len(pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=50, help="A/A pairs")
    parser.add_argument("--slow-pairs", type=int, default=25, help="pairs for each slowdown")
    args = parser.parse_args()
    job_port, port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        sidecar = start_service(Path(tmp) / "store", f"grpc://127.0.0.1:{job_port}", port)
        url = f"http://127.0.0.1:{port}"
        try:
            base = captures(url, job_port, BASE_RECORDS, args.pairs + 1)
            slow = {
                extra: captures(url, job_port, BASE_RECORDS + extra, args.slow_pairs)
                for extra in (2, 4)
            }
        finally:
            sidecar.terminate()
            sidecar.wait(60)
    aa = list(itertools.pairwise(base))
    mean = statistics.fmean(s.step_time.avg_ms for s in base)
    print(f"base job: {len(base)} captures, step {mean:.1f} ms on average")
    print("| pairs | n | real change (median) | threshold | flagged by interval | by bare ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, pairs in [("A/A", aa)] + [
        (f"+{extra / BASE_RECORDS:.0%} work", list(zip(base, s, strict=False)))
        for extra, s in slow.items()
    ]:
        changes = [b.step_time.avg_ms / a.step_time.avg_ms - 1 for a, b in pairs]
        for threshold in THRESHOLDS:
            interval, ratio = flagged(pairs, threshold)
            print(
                f"| {name} | {len(pairs)} | {statistics.median(changes):+.1%} | "
                f"{threshold:.0%} | {interval:.0%} | {ratio:.0%} |"
            )
            if threshold == 0.0:
                if name == "A/A":
                    record("A/A pairs flagged (interval > 0)", 100 * interval, "<= 1 %",
                           interval <= 0.01, "%")  # fmt: skip
                else:
                    record(f"{name} caught (interval > 0)", 100 * interval, ">= 95 %",
                           interval >= 0.95, "%")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
