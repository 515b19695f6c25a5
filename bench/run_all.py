"""Runs every benchmark, each in its own process, and prints their headline figures in one table.

Each benchmark appends its figures to $BENCH_FIGURES (bench_common.record); its full output goes
to a log file whose path is printed. The table is Markdown, with the machine's cores and load
before and after, so it can go into the README as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (script, arguments, --quick arguments)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "analysis": ("bench_analysis.py", [], ["--rounds", "2"]),
    "growth": ("bench_growth.py", [], ["--durations", "1", "5", "20"]),
    "tracers": ("bench_tracers.py", [], ["--rounds", "2", "--seconds", "3"]),
    "overhead": ("bench_overhead.py", [], ["--rounds", "3", "--steps", "200"]),
    "stacks": ("bench_stacks.py", [], ["--blocks", "40"]),
    "verification": ("bench_verification.py", [], ["--pairs", "4"]),
    "calibration": ("bench_calibration.py", [], ["--from-corpus"]),
    "allocator": ("bench_allocator_events.py", [], ["--rounds", "1", "--steps", "100"]),
    "metrics": ("bench_metrics.py", [], []),
    "webhooks": ("bench_webhooks.py", [], []),
    "hub": ("bench_hub.py", [], ["--snapshots", "2000", "--sidecars", "100"]),
    "hub-database": (
        "bench_hub_database.py",
        [],
        ["--snapshots", "20000", "--sidecars", "500", "--sync-snapshots", "2000"],
    ),
    "ledger": ("bench_ledger.py", [], ["--jobs", "200", "--rounds", "1"]),
    "explain": ("bench_explain.py", [], ["--jobs", "120", "--budgets", "6", "12"]),
    "soak": ("bench_soak.py", ["--max-minutes", "90"], ["--captures", "200"]),
    "soak-in-process": (
        "bench_soak.py",
        ["--in-process", "--captures", "5000", "--sample-every", "250", "--max-minutes", "60"],
        ["--in-process", "--captures", "200"],
    ),
    "footprint": (
        "bench_footprint.py",
        ["--skip-install"],
        ["--skip-install", "--durations", "1", "5"],
    ),
}


def machine() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores ({platform.machine()}), load average {load}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and durations")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="bench-run-"))
    figures = logs / "figures.jsonl"
    before = machine()
    failed = []
    for name in args.only:
        script, full, quick = BENCHMARKS[name]
        log = logs / f"{name}.log"
        started = time.monotonic()
        print(f"{name:<10} running ({log}) ...", end=" ", flush=True)
        with log.open("w") as out:
            code = subprocess.call(
                [sys.executable, str(HERE / script), *(quick if args.quick else full)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "BENCH_FIGURES": str(figures), "TF_CPP_MIN_LOG_LEVEL": "2"},
                cwd=HERE.parent,
            )
        print(f"{'done' if code == 0 else f'exit {code}'} in {time.monotonic() - started:.0f} s")
        if code != 0:
            failed.append(name)
    rows = (
        [json.loads(line) for line in figures.read_text().splitlines()] if figures.exists() else []
    )
    print(f"\nmachine: {before} before; {machine()} after\n")
    print("| figure | value | aim | met |")
    print("|---|---:|---|---|")
    for row in rows:
        met = {True: "yes", False: "**no**", None: ""}[row["met"]]
        print(f"| {row['figure']} | {row['value']:.3g} {row['unit']} | {row['aim']} | {met} |")
    print(f"\nfull outputs: {logs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
