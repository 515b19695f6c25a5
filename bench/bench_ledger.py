"""The fleet ledger at scale: a week of DCGM GPU utilisation for 2,000 jobs in a real Prometheus.

    .venv/bin/python bench/bench_ledger.py [--jobs 2000] [--days 7] [--interval 60]
        [--other-interval S] [--captures-per-job 3] [--rounds 3] [--keep DIR]

The fleet (tests/hub/gpu_fleet.py) is written into Prometheus's TSDB by promtool; each job gets
`--captures-per-job` captures whose GPU idle causes and savings are real GPU captures' (the
corpus of tests/fixtures/gpu-captures, analysed here by XProf). Then, side by side in one run:
- the baseline: the ledger's three Prometheus range queries alone (gpu_hours.query_gpu_hours);
- the whole ledger (build_ledger: the queries, pods to jobs, buckets to captures, costs) over
  7 days and over 24 hours (held hours: samples x the interval the samples show), over 7 days
  with the interval set (`hub_gpu_scrape_interval_s`; not with `--other-interval`), and over
  7 days by presence intervals for every GPU (the subquery a fleet whose series are scraped at
  different intervals got before each pod's samples counted at its own interval);
  `--other-interval`: every third job scraped at that interval instead (the default ledger then
  counts each pod at its own);
and the ledger's totals against the series themselves (held and busy GPU-hours, to 1 %), and
every idle hour given to a cause. `--keep DIR` keeps the TSDB (promtool's minutes) and the
captures' causes for the next run of the same fleet.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from bench_common import free_port, record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "hub"))

from gpu_fleet import GPU_CAPTURES, capture_wastes, create_blocks, make_fleet  # noqa: E402

from profiler_service.config import LedgerSettings  # noqa: E402
from profiler_service.hub.gpu_hours import query_gpu_hours  # noqa: E402
from profiler_service.hub.index.fleet_queries import FleetRow  # noqa: E402
from profiler_service.hub.ledger import build_ledger  # noqa: E402

CORPUS = GPU_CAPTURES
RUNS = [
    CORPUS / "mholmeslinder-semi-supervised-cv" / "2020_12_21_16_42_56",
    CORPUS / "aoberai-chess-engine" / "logs__fit__20210616-112155__train__2021_06_16_11_22_03",
    CORPUS / "jax-h200" / "input_starved_python",
    CORPUS / "jax-h200" / "tiny_kernels",
    CORPUS / "jax-h200" / "transfers",
    CORPUS / "jax-h200" / "fp32_matmul",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--interval", type=int, default=60, help="seconds between samples")
    parser.add_argument(
        "--other-interval", type=int, help="seconds between samples of every third job"
    )
    parser.add_argument("--captures-per-job", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--keep", type=Path, help="a folder keeping the fleet's TSDB and the captures' causes "
        "for the next run with the same fleet (promtool is most of a run's time)",
    )  # fmt: skip
    args = parser.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    tmp.mkdir(parents=True, exist_ok=True)
    shape = {k: getattr(args, k) for k in ("jobs", "days", "interval", "other_interval")}
    kept = json.loads((tmp / "fleet.json").read_text()) if (tmp / "fleet.json").exists() else {}
    if kept.get("shape") != shape:
        kept = {"shape": shape, "now": time.time()}
        shutil.rmtree(tmp / "prometheus", ignore_errors=True)
    now = kept["now"]
    started = time.monotonic()
    fleet = make_fleet(args.jobs, end=now - 120, days=args.days, interval_s=args.interval,
                       namespaces=40, seed=3, other_interval_s=args.other_interval)  # fmt: skip
    made_s = time.monotonic() - started
    started = time.monotonic()
    if (tmp / "prometheus" / "data").exists():
        data = tmp / "prometheus" / "data"  # kept from a run with the same fleet
    else:
        data = create_blocks(fleet, tmp / "prometheus")
        if args.keep:
            (tmp / "fleet.json").write_text(json.dumps(kept))
    blocks_s = time.monotonic() - started
    every = f"{args.interval} s" + (
        f" ({args.other_interval} s for every third job)" if args.other_interval else ""
    )
    print(
        f"fleet: {args.jobs} jobs, {len(fleet.series)} GPU series, {fleet.samples():,} samples "
        f"every {every}; generated in {made_s:.0f} s, promtool {blocks_s:.0f} s"
    )
    port = free_port()
    prometheus = subprocess.Popen(
        ["prometheus", "--config.file=/dev/null", f"--storage.tsdb.path={data}",
         "--storage.tsdb.retention.time=365d", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        rng = random.Random(5)
        causes = tmp / "captures.json"
        if causes.exists():
            kinds = json.loads(causes.read_text())
        else:
            kinds = capture_wastes(RUNS, tmp / "captures")
            causes.write_text(json.dumps(kinds))
        rows = []
        for n, ((namespace, job), series) in enumerate(sorted(fleet.jobs().items())):
            first, last = int(series[0].times[0]), int(max(s.times[-1] for s in series))
            for k in range(args.captures_per_job):
                at = rng.uniform(first, last)
                created = datetime.fromtimestamp(at, UTC).isoformat()
                pod, waste = series[0].pod, rng.choice(kinds)
                rows.append(FleetRow(f"{n}-{k}", namespace, "trainer", pod, created, 100.0,
                                     "device", "", "", False, job, waste))  # fmt: skip
        rows.sort(key=lambda r: r.created_at)
        settings = LedgerSettings(hub_prometheus_url=url, hub_prometheus_timeout_s=300,
                                  hub_gpu_hour_prices="A100=2.9,H100=4.5,*=2")  # fmt: skip
        known = settings.model_copy(update={"gpu_scrape_interval_s": args.interval})
        figures: dict[str, list[float]] = {
            "queries 7d": [], "ledger 7d": [], "ledger 24h": [], "ledger 7d, interval set": [],
            "ledger 7d, by presence": [],
        }  # fmt: skip

        def by_presence(s: int, e: int, b: int):
            return query_gpu_hours(settings, s, e, b, presence=True)

        ledger = None
        for _ in range(args.rounds):
            end = time.time()
            start = int(end // 60 * 60) - int(args.days * 86400)
            t = time.monotonic()
            query_gpu_hours(settings, start, int(end // 60 * 60), 3600)
            figures["queries 7d"].append(time.monotonic() - t)
            t = time.monotonic()
            ledger = build_ledger(rows, settings, window_s=args.days * 86400, end=end)
            figures["ledger 7d"].append(time.monotonic() - t)
            t = time.monotonic()
            build_ledger(rows, settings, window_s=86400, end=end)
            figures["ledger 24h"].append(time.monotonic() - t)
            if not args.other_interval:  # one interval set would miscount a mixed fleet
                t = time.monotonic()
                fast = build_ledger(rows, known, window_s=args.days * 86400, end=end)
                figures["ledger 7d, interval set"].append(time.monotonic() - t)
            t = time.monotonic()
            slow = build_ledger(rows, settings, window_s=args.days * 86400, end=end,
                                gpu_hours=by_presence)  # fmt: skip
            figures["ledger 7d, by presence"].append(time.monotonic() - t)
        assert ledger is not None
        base = statistics.median(figures["queries 7d"])
        print(f"\n{'':<26} {'median s':>9} {'min s':>7} {'x queries':>10}")
        for name, values in figures.items():
            if not values:
                continue
            med = statistics.median(values)
            print(f"{name:<26} {med:>9.2f} {min(values):>7.2f} {med / base:>10.2f}")
        t = ledger.totals
        held = sum(s.held_s(ledger.start, ledger.end) for s in fleet.series) / 3600
        busy = sum(s.busy_s(ledger.start, ledger.end) for s in fleet.series) / 3600
        causes = sum(t.idle_by_cause.values())
        print(f"\nledger over {ledger.window}: {t.jobs} jobs, {t.gpu_hours:,.1f} GPU-hours held "
              f"(series: {held:,.1f}, {t.gpu_hours / held - 1:+.3%}), busy {t.busy_gpu_hours:,.1f} "
              f"(series: {busy:,.1f}, {t.busy_gpu_hours / busy - 1:+.3%}), idle "
              f"{t.idle_gpu_hours:,.1f} of which by cause {causes:,.1f}, recoverable "
              f"{t.recoverable_gpu_hours:,.1f}, cost {t.cost:,.0f}")  # fmt: skip
        print("idle by cause: " + ", ".join(f"{c} {h:,.0f}" for c, h in
                                            sorted(t.idle_by_cause.items())))  # fmt: skip
        others = [("interval set", fast)] if not args.other_interval else []
        for name, other in [*others, ("by presence", slow)]:
            t2 = other.totals
            print(f"{name}: held {t2.gpu_hours:,.1f} ({t2.gpu_hours / held - 1:+.3%}), busy "
                  f"{t2.busy_gpu_hours:,.1f} ({t2.busy_gpu_hours / busy - 1:+.3%})")  # fmt: skip
        print("the default ledger's method: " + ledger.notes[0])
        week = statistics.median(figures["ledger 7d"])
        mixed = " at two scrape intervals" if args.other_interval else ""
        record(f"ledger, {args.jobs} jobs x {args.days:g} days{mixed}", week, "< 5 s", week < 5,
               "s")  # fmt: skip
        slowest = statistics.median(figures["ledger 7d, by presence"])
        record(f"ledger, {args.jobs} jobs x {args.days:g} days, every GPU by presence "
               "intervals", slowest, "", None, "s")  # fmt: skip
        exact = abs(t.gpu_hours / held - 1) < 0.01 and abs(t.busy_gpu_hours / busy - 1) < 0.01
        record("ledger sums against the series", abs(t.gpu_hours / held - 1) * 100, "< 1 %",
               exact, "%")  # fmt: skip
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
