"""The fleet hub on PostgreSQL at a million snapshots: one shared index, replicas that hold no
state, syncs that list only what is new.

    .venv/bin/python bench/bench_hub_database.py [--snapshots 1000000] [--sidecars 5000]
        [--days 730] [--sync-snapshots 20000] [--requests 200] [--scrapes 50]
        [--seed SNAPSHOT_JSON] [--baseline-code DIR]

Every piece is real, in its own process on loopback: PostgreSQL 15 (`initdb` into a temporary
folder, tests/postgres_server.py) and `profiler-service hub` replicas over a `file://` bucket.

1. **The index at `--snapshots`** from `--sidecars` sidecars over two years: the rows the sync
   writes (hub/index/writes.py `snapshot_row` of a real snapshot, `--seed` or one captured from
   a real Keras job, varied in id, job, namespace, pod, time, step time, status and findings),
   loaded with COPY: a first sync of a million snapshot.json files is measured per snapshot in
   step 5, not run here (46 GB of JSON would not fit this disk).
   `--days`: the span they are taken over (the fleet view's 7 days hold `--snapshots` x 7 /
   `--days` of them: 1,000,000 over 730 days and 500,000 over 365 give about the same jobs).
2. **A replica's start** on that index: the process spawned to `/readyz` answering 200, and to
   its first listing; its RSS after every step below.
3. **Listings**: `GET /profiles` with each filter, a deep keyset page and a deep offset: p50
   and p99 over `--requests` each, a client on loopback.
4. **`/fleet`** (the 7-day view; the first build, then p99) and `/metrics` (the first scrape,
   then p50 and p99, in the text format and OpenMetrics).
5. **An incremental sync**: 100 new snapshots in the bucket; the sync's own time (its log line).
6. **The first sync, once for the fleet, with a replica killed in the middle**: a second
   database and `--sync-snapshots` real-size snapshot.json files with their sidecars'
   manifests; two replicas start together, the one holding the sync's lease is killed (SIGKILL)
   when a third of the fleet is indexed, the other finishes. Checked: every snapshot indexed
   once (rows == snapshots; what the killed one committed plus what the survivor indexed ==
   snapshots). The rate gives the first sync at `--snapshots`. `--sync-snapshots 0` skips it.

`--baseline-code DIR`: steps 2-4 again, first, with a replica running the code of DIR (a
checkout of the commit to compare with, e.g. `git archive HEAD~1 profiler_service | tar -x -C
DIR`) on the same index: before and after, side by side, from one run.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psutil
import psycopg
from bench_common import free_port, record
from bench_hub import (
    RULES,
    env,
    fill_made,
    fleet_doc,
    percentiles,
    real_snapshot,
    rss_mb,
    stop,
    wait_http,
    wait_sync,
    write_manifests,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from postgres_server import PostgresServer

from profiler_service.hub.index.database import FleetDatabase, database_url
from profiler_service.hub.index.sync import LATE_S
from profiler_service.hub.index.writes import snapshot_row
from profiler_service.models import Snapshot
from profiler_service.store.events import RemoteSnapshot

SNAPSHOT_COLUMNS = [
    "id", "location", "version", "status", "target", "trigger", "pod", "namespace", "workload",
    "created_at", "pinned", "step_time_ms", "bottleneck", "rules", "findings", "gpu_waste", "item",
]  # fmt: skip
ITEM_FIELDS = ("id", "target", "pod", "namespace", "workload", "created_at")
# The hub's log line of one sync (hub/fleet_sync.py): listed, indexed, its seconds.
OPENMETRICS = {"Accept": "application/openmetrics-text; version=1.0.0"}
SYNC_LINE = r"fleet sync: (\d+) snapshots listed \({}\), (\d+) indexed, \d+ dropped in ([\d.]+) s"


def variants(template: dict) -> list[tuple[dict, list[dict], dict]]:
    """(row, finding rows, list item) of the template with each set of findings and status."""
    out = []
    for k in range(24):
        doc = fleet_doc(template, k, 1, datetime.now(UTC), random.Random(k))
        snapshot = Snapshot.model_validate(doc)
        row, findings = snapshot_row(RemoteSnapshot(snapshot, 1))
        out.append((row, findings, json.loads(row["item"])))
    return out


def fill_index(
    url: str, template: dict, n: int, sidecars: int, rng: random.Random, days: float = 730
) -> float:
    """COPY `n` rows made from the template's variants, taken over `days`; returns the seconds
    it took."""
    kinds = variants(template)
    now = datetime.now(UTC)
    started = time.perf_counter()
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        for first in range(0, n, 100_000):
            rows, findings = io.StringIO(), io.StringIO()
            for i in range(first, min(n, first + 100_000)):
                row, its, item = rng.choice(kinds)
                j = i % sidecars
                created = now - timedelta(seconds=rng.uniform(3600, days * 86400))
                target = f"job-{j:04d}"
                values = {
                    **row,
                    "id": f"{created:%Y%m%d-%H%M%S}-{target}-{rng.getrandbits(48):012x}",
                    "target": target,
                    "pod": f"{target}-0",
                    "namespace": f"team-{j % 100:02d}",
                    "workload": f"release-{j % 1000:03d}",
                    "created_at": created.isoformat(),
                    "version": rng.getrandbits(40),
                }
                if row["step_time_ms"] is not None:
                    values["step_time_ms"] = rng.uniform(20, 400)
                values["item"] = json.dumps({**item, **{f: values[f] for f in ITEM_FIELDS}})
                rows.write("\t".join(_copy_value(values[c]) for c in SNAPSHOT_COLUMNS) + "\n")
                for f in its:
                    findings.write(f"{values['id']}\t{f['rule']}\t{f['severity']}\t{created}\t"
                                   f"{values['namespace']}\n")  # fmt: skip
            with cur.copy(f"COPY snapshots ({', '.join(SNAPSHOT_COLUMNS)}) FROM STDIN") as copy:
                copy.write(rows.getvalue())
            with cur.copy(
                "COPY findings (snapshot_id, rule, severity, created_at, namespace) FROM STDIN"
            ) as c:
                c.write(findings.getvalue())
            conn.commit()
            print(f"  {min(n, first + 100_000):,} rows", flush=True)
        cur.execute("ANALYZE")
        # What a sync leaves for the next: the cursor, a whole listing just done.
        state = {
            "cursor": (now - timedelta(seconds=LATE_S)).strftime("%Y%m%d-%H%M%S"),
            "last_full_at": repr(time.time()),
            "last_sync_at": "0",
            "changes": "1",
        }
        cur.executemany("INSERT INTO sync_state (key, value) VALUES (%s, %s)", list(state.items()))
        conn.commit()
    return time.perf_counter() - started


def _copy_value(value: object) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def start_hub(
    work: Path, name: str, url: str, store_url: str, code: Path | None = None, **extra: str
) -> tuple:
    """`code`: a folder holding the `profiler_service` to run instead of this one (run from
    there: `-m` puts the working directory first on the path)."""
    port = free_port()
    log = work / f"{name}.log"
    hub_env = {
        **env(),
        **({"PYTHONPATH": str(code)} if code else {}),
        "PROFILER_STORE_URL": store_url,
        "PROFILER_HUB_DATABASE_URL": url,
        "PROFILER_HUB_SYNC_INTERVAL_S": "2",
        "PROFILER_HUB_FULL_SYNC_INTERVAL_S": "86400",
        "PROFILER_HUB_SIDECAR_TTL_S": "3600",
        "PROFILER_HUB_TOKEN": "bench-hub",
        **extra,
    }
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler_service.cli", "--log-level", "INFO", "hub",
         "--store", str(work / name), "--port", str(port), "--insecure"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env=hub_env, cwd=code,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}", log, started


def ready(proc: subprocess.Popen, base: str, started: float) -> tuple[float, float]:
    """Seconds from the spawn to /readyz 200, and to the first listing."""
    wait_http(f"{base}/healthz", proc, 120)
    while httpx.get(f"{base}/readyz", timeout=10).status_code != 200:
        time.sleep(0.05)
    at_ready = time.perf_counter() - started
    assert httpx.get(f"{base}/profiles", timeout=30).status_code == 200
    return at_ready, time.perf_counter() - started


def timed(
    client: httpx.Client, path: str, params: dict, n: int, headers: dict | None = None
) -> list[float]:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        answer = client.get(path, params=params, headers=headers)
        samples.append(time.perf_counter() - t)
        assert answer.status_code == 200, answer.text[:500]
    return samples


def listings(client: httpx.Client, n: int, now: datetime) -> dict[str, list[float]]:
    deep = {"limit": 50}
    for _ in range(40):  # 40 pages in by `next`: 2,000 snapshots deep
        deep["before"] = client.get("/profiles", params=deep).json()["next"]
    cases = {
        "newest 50": {},
        "namespace": {"namespace": "team-42"},
        "target": {"target": "job-0042"},
        "pod": {"pod": "job-0042-0"},
        "workload": {"workload": "release-042"},
        f"rule ({RULES[0][0]})": {"rule": RULES[0][0]},
        "severity critical": {"severity": "critical"},
        "status failed": {"status": "failed"},
        "since 1 day": {"since": (now - timedelta(days=1)).isoformat()},
        "namespace + rule": {"namespace": "team-42", "rule": RULES[2][0]},
        "keyset 2,000 deep": deep,
        "offset 10,000": {"offset": 10_000},
    }
    return {name: timed(client, "/profiles", params, n) for name, params in cases.items()}


def serve(args, work: Path, url: str, bucket: Path, procs: list, name: str, code: Path | None):
    """Steps 2-4 with a replica of `code` (None: this one): its start, the listings, the fleet
    view, the scrapes; the replica and its log, still running."""
    # 2. A replica's start.
    hub, base, log, started = start_hub(work, name, url, f"file://{bucket}", code)
    procs.append(hub)
    at_ready, at_listing = ready(hub, base, started)
    print(f"replica start: /readyz in {at_ready:.2f} s, first listing in {at_listing:.2f} s")
    tag = " (baseline)" if code else ""
    record(f"hub on PostgreSQL: a replica ready{tag}", at_ready, "< 5 s", at_ready < 5, "s")
    # 3-4. Listings, the fleet view, a scrape.
    now = datetime.now(UTC)
    worst = 0.0
    with httpx.Client(base_url=base, timeout=60) as client:
        for name, samples in listings(client, args.requests, now).items():
            print(f"  GET /profiles {name:<22} {percentiles(samples)}")
            worst = max(worst, sorted(samples)[min(len(samples) - 1, int(len(samples) * 0.99))])
        first_fleet = timed(client, "/fleet", {}, 1)[0]
        fleet = timed(client, "/fleet", {}, 20)
        # The first scrape of each format encodes the view's series; after it, a sync round
        # (2 s here) keeps them encoded (hub/metrics.py `prepare`), and the scrapes reuse them.
        first_scrape = timed(client, "/metrics", {}, 1)[0]
        size = len(client.get("/metrics").content)
        first_om = timed(client, "/metrics", {}, 1, OPENMETRICS)[0]
        time.sleep(3)
        scrape = timed(client, "/metrics", {}, args.scrapes)
        scrape_om = timed(client, "/metrics", {}, args.scrapes, OPENMETRICS)
    print(f"  GET /fleet: first build {first_fleet * 1000:.0f} ms; then {percentiles(fleet)}")
    print(f"  GET /metrics ({size / 2**20:.1f} MiB): first {first_scrape * 1000:.0f} ms; then "
          f"{percentiles(scrape)}")  # fmt: skip
    print(f"  GET /metrics, OpenMetrics: first {first_om * 1000:.0f} ms; then "
          f"{percentiles(scrape_om)}")  # fmt: skip
    scrape_p99 = sorted(scrape)[min(len(scrape) - 1, int(len(scrape) * 0.99))]
    record(f"hub on PostgreSQL: /metrics p99{tag}", scrape_p99 * 1000, "< 100 ms", scrape_p99 < 0.1,
           "ms")  # fmt: skip
    fleet_p99 = sorted(fleet)[-1]
    record(
        f"hub on PostgreSQL: listing p99, worst filter{tag}",
        worst * 1000,
        "< 50 ms",
        worst < 0.05,
        "ms",
    )
    record(
        f"hub on PostgreSQL: /fleet p99{tag}", fleet_p99 * 1000, "< 200 ms", fleet_p99 < 0.2, "ms"
    )

    return hub, log


def lease_holder(url: str, hubs: list[subprocess.Popen]) -> subprocess.Popen | None:
    """The replica whose connection holds the sync's advisory lock."""
    with psycopg.connect(url) as conn:
        ports = {
            row[0]
            for row in conn.execute(
                "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted"
            )
        }
    for hub in hubs:
        mine = {c.laddr.port for c in psutil.Process(hub.pid).net_connections("tcp") if c.laddr}
        if mine & ports:
            return hub
    return None


def count_rows(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM snapshots").fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=1_000_000)
    parser.add_argument("--sidecars", type=int, default=5_000)
    parser.add_argument("--sync-snapshots", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=200, help="per listing query")
    parser.add_argument("--seed", type=Path, help="a real snapshot.json (default: capture one)")
    parser.add_argument("--scrapes", type=int, default=50, help="per /metrics format")
    parser.add_argument("--days", type=float, default=730, help="the span of the snapshots")
    parser.add_argument(
        "--baseline-code", type=Path, help="a folder holding the profiler_service to compare"
    )
    args = parser.parse_args()
    procs: list[subprocess.Popen] = []
    server = None
    with tempfile.TemporaryDirectory(prefix="bench-hub-db-") as tmp:
        work = Path(tmp)
        try:
            server = PostgresServer().start()
            run(args, work, server, procs)
        finally:
            for proc in reversed(procs):
                stop(proc)
            if server is not None:
                server.stop()


def run(args, work: Path, server: PostgresServer, procs: list) -> None:
    rng = random.Random(41)
    seed = args.seed or real_snapshot(work)
    template = json.loads(seed.read_text())
    print(f"seed snapshot {template['id']}: {seed.stat().st_size / 1024:.1f} KiB of JSON")

    # 1. The index.
    url = database_url(server.database(), work)
    FleetDatabase(url).migrate()
    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    took = fill_index(libpq, template, args.snapshots, args.sidecars, rng, args.days)
    size = FleetDatabase(url).size_bytes() or 0
    print(f"index: {args.snapshots:,} snapshots loaded in {took:.0f} s; {size / 2**20:,.0f} MiB")

    bucket = work / "bucket"
    bucket.mkdir()
    now = datetime.now(UTC)
    if args.baseline_code:
        print(f"\n-- the baseline: a replica running {args.baseline_code}")
        old = serve(args, work, url, bucket, procs, "hub-baseline", args.baseline_code)
        stop(old[0])
        print("\n-- this code")
    hub, log = serve(args, work, url, bucket, procs, "hub-a", None)

    # 5. An incremental sync: 100 new snapshots.
    import fsspec

    new = fill_made(
        fsspec.filesystem("file"), str(bucket), True,
        lambda i: just_taken(fleet_doc(template, i, args.sidecars, now, rng), i, rng), 100,
    )  # fmt: skip
    found = wait_sync(log, SYNC_LINE.format("since the cursor"), 120, lambda m: int(m[2]) > 0)
    print(f"incremental sync: {found[1]} listed, {found[2]} indexed in {float(found[3]):.2f} s "
          f"(of {len(new)} new)")  # fmt: skip
    record(
        "hub on PostgreSQL: incremental sync", float(found[3]), "< 5 s", float(found[3]) < 5, "s"
    )
    rss, hwm = rss_mb(hub.pid)
    print(f"hub RSS {rss:.0f} MiB (peak {hwm:.0f} MiB)")
    record("hub on PostgreSQL: RSS", rss, "< 300 MiB", rss < 300, "MiB")
    stop(hub)
    size = FleetDatabase(url).size_bytes() or 0
    print(f"database size: {size / 2**20:,.0f} MiB at {args.snapshots:,} snapshots")

    # 6. The first sync, once for the fleet, one replica killed in the middle.
    if not args.sync_snapshots:
        return
    fleet_bucket = work / "fleet-bucket"
    started = time.perf_counter()
    docs = fill_made(
        fsspec.filesystem("file"), str(fleet_bucket), True,
        lambda i: fleet_doc(template, i, args.sidecars, now, rng), args.sync_snapshots,
    )  # fmt: skip
    write_manifests(f"file://{fleet_bucket}", {}, docs)
    print(f"bucket: {len(docs):,} snapshot.json and their manifests written in "
          f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    second = database_url(server.database(), work)
    libpq2 = second.replace("postgresql+psycopg://", "postgresql://")
    replicas = [start_hub(work, f"hub-{k}", second, f"file://{fleet_bucket}") for k in "bc"]
    procs += [r[0] for r in replicas]
    began = min(r[3] for r in replicas)
    for proc, base, _, started in replicas:
        ready(proc, base, started)
    holder, committed = None, 0
    while committed < len(docs) and (holder is None or committed < len(docs) // 3):
        holder = holder or lease_holder(libpq2, [r[0] for r in replicas])
        time.sleep(0.2)
        committed = count_rows(libpq2)
    if holder is not None:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    killed_at = time.perf_counter() - began
    committed = count_rows(libpq2)
    if committed >= len(docs):
        raise SystemExit(
            f"the first sync of {len(docs):,} snapshots ended before its replica could be killed "
            "in the middle: give --sync-snapshots more"
        )
    survivor = next(r for r in replicas if r[0] is not holder)
    found = wait_sync(survivor[2], SYNC_LINE.format("whole bucket"), 3600, lambda m: int(m[2]) > 0)
    total = time.perf_counter() - began
    rows = count_rows(libpq2)
    print(f"first sync of {len(docs):,}: the lease holder killed at {killed_at:.0f} s with "
          f"{committed:,} indexed; the other indexed {found[2]} in {float(found[3]):.0f} s; "
          f"{rows:,} rows in all ({total:.0f} s)")  # fmt: skip
    assert rows == len(docs) and committed + int(found[2]) == len(docs), (rows, committed, found)
    per_snapshot = float(found[3]) / int(found[2])
    print(f"  {per_snapshot * 1000:.2f} ms a snapshot: a first sync of {args.snapshots:,} "
          f"~{per_snapshot * args.snapshots / 60:.0f} min, once for the fleet")  # fmt: skip
    record("hub on PostgreSQL: first sync, a snapshot", per_snapshot * 1000, "", None, "ms")


def just_taken(doc: dict, i: int, rng: random.Random) -> dict:
    """The doc as taken `i` seconds ago (its id begins with the time: a sync's cursor)."""
    created = datetime.now(UTC) - timedelta(seconds=i)
    doc["id"] = f"{created:%Y%m%d-%H%M%S}-{doc['target']}-{rng.getrandbits(48):012x}"
    doc["created_at"] = created.isoformat()
    return doc


if __name__ == "__main__":
    main()
