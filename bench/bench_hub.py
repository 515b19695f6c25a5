"""The fleet hub at scale: a bucket of 10,000 snapshots from 500 registered sidecars.

    .venv/bin/python bench/bench_hub.py [--snapshots 10000] [--sidecars 500] [--seed SNAPSHOT_JSON]
        [--bucket s3|file] [--no-manifests]

Every piece is real and runs in its own process on loopback: an S3 API (moto's standalone
server), `profiler-service hub` over it, and one `profiler-service serve` sidecar. The bucket's
`snapshot.json` files are made from one real snapshot (`--seed`; by default this script captures
a real Keras job through a real sidecar first): the same summary, findings and lead-up, with
varied ids, namespaces, targets, pods, times (over 7 days), step times, findings and statuses,
written as the sidecars' mirrors write them, each sidecar's manifest too (store/manifest.py;
`--no-manifests`: none, every snapshot.json read by itself).

It measures:
- the first sync (from the hub's own log line: list, read and index every snapshot.json), and the
  hub's RSS after it and at its peak (VmHWM);
- an incremental sync after 100 new snapshots (and 10 deletions);
- GET /profiles with filters (namespace, target, rule, severity, status, since; 50 a page, deep
  pages): p50 and p99 as a client on loopback sees them;
- webhook routing: one alert posted to the sidecar directly, and the same through the hub among
  500 registered sidecars (the sidecar decides "throttled": no capture, in memory); the hub's
  added latency (p50, p99) and its throughput with 16 concurrent senders;
- the fleet page and one /metrics scrape over the whole index.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from bench_common import free_port, record, start_job

KEY = SECRET = "bench"
BUCKET = "fleet"
WHOLE = r"fleet sync: {} snapshots listed \(whole bucket\)"  # the hub's log line of a sync
RULES = [
    ("input_bound", "warning"),
    ("host_bound", "critical"),
    ("kernel_launch_bound", "warning"),
    ("memory_near_capacity", "critical"),
    ("small_batches", "info"),
]


def env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- a real snapshot to copy -----------------------------------------------------------------


def real_snapshot(work: Path) -> Path:
    """Capture a real compute-bound Keras job through a real sidecar; its snapshot.json."""
    port = free_port()
    job = start_job(port, "input-bound", seconds=300)
    try:
        store = work / "seed-store"
        done = subprocess.run(
            [sys.executable, "-m", "profiler_service.cli", "capture", "--store", str(store),
             "--target", f"trainer=grpc://127.0.0.1:{port}", "--duration", "1s"],
            capture_output=True, text=True, env=env(), timeout=300,
        )  # fmt: skip
        found = sorted(store.glob("plugins/profile/*/snapshot.json"))
        if not found:
            raise RuntimeError(f"no snapshot: {done.stderr[-2000:]}")
        return found[-1]
    finally:
        job.terminate()
        job.wait(30)


# ---- the bucket ------------------------------------------------------------------------------


def fleet_doc(template: dict, i: int, sidecars: int, now: datetime, rng: random.Random) -> dict:
    j = i % sidecars
    created = now - timedelta(seconds=rng.uniform(0, 7 * 86400))
    target = f"job-{j:03d}"
    doc = json.loads(json.dumps(template))  # deep copy
    doc["id"] = f"{created:%Y%m%d-%H%M%S}-{target}-{rng.getrandbits(48):012x}"
    doc["target"], doc["pod"], doc["namespace"] = target, f"{target}-0", f"team-{j % 25:02d}"
    doc["created_at"] = created.isoformat()
    doc["pinned"] = False
    if rng.random() < 0.05:
        doc.update(status="failed", summary=None, findings=[], files=[],
                   error={"code": "capture_failed", "detail": "nothing listened"})  # fmt: skip
        return doc
    doc["status"] = "ready"
    if doc.get("summary"):
        doc["summary"]["step_time"]["avg_ms"] = rng.uniform(20, 400)
        doc["summary"]["bottleneck"] = rng.choice(["input", "host", "device"])
    base = (doc.get("findings") or [{"title": "", "evidence": {}, "recommendation": ""}])[0]
    doc["findings"] = [
        {**base, "rule": rule, "severity": severity, "title": f"{rule} on {target}"}
        for rule, severity in rng.sample(RULES, rng.randint(0, 3))
    ]
    return doc


def write_manifests(store_url: str, options: dict, docs: list[dict]) -> int:
    """Each sidecar's manifest, as its mirror writes it: every doc with its listed version
    (read back from the bucket a sidecar at a time: 100,000 documents do not fit in memory)."""
    from profiler_service.store.bucket_client import BucketClient
    from profiler_service.store.manifest import ManifestEntry, encode, manifest_path, sidecar_key

    mirror = BucketClient(store_url, options)
    listed = mirror.list_snapshots()
    by_sidecar: dict[tuple[str, str], list[str]] = {}
    for d in docs:
        by_sidecar.setdefault((d["pod"], d["namespace"]), []).append(d["id"])
    written = 0
    for (pod, namespace), ids in by_sidecar.items():
        entries = [listed[i] for i in ids if i in listed]
        texts = mirror.read_docs(entries)  # one line each: fill() wrote json.dumps
        data = encode(
            ManifestEntry(e.id, e.location, e.version, texts[e.id].decode())
            for e in entries
            if e.id in texts
        )
        mirror.put_record(manifest_path(sidecar_key(pod, namespace)), data)
        written += len(data)
    return written


def fill_made(fs, prefix: str, file_bucket: bool, make, count: int) -> list[dict]:
    """Write `count` docs made by `make(i)`, 500 at a time; returns only their ids and places."""
    kept = []
    for first in range(0, count, 500):
        docs = [make(i) for i in range(first, min(count, first + 500))]
        if file_bucket:
            for d in docs:
                where = "plugins/profile" if d["status"] == "ready" else "failed"
                fs.makedirs(f"{prefix}/{where}/{d['id']}", exist_ok=True)
        fill(fs, prefix, docs)
        kept += [{k: d[k] for k in ("id", "status", "pod", "namespace")} for d in docs]
    return kept


def fill(fs, prefix: str, docs: list[dict]) -> None:
    for first in range(0, len(docs), 500):
        fs.pipe(
            {
                f"{prefix}/plugins/profile/{d['id']}/snapshot.json"
                if d["status"] == "ready"
                else f"{prefix}/failed/{d['id']}/snapshot.json": json.dumps(d).encode()
                for d in docs[first : first + 500]
            }
        )


# ---- measuring -------------------------------------------------------------------------------


def p99_ms(samples_s: list[float]) -> float:
    ms = sorted(s * 1000 for s in samples_s)
    return ms[min(len(ms) - 1, int(len(ms) * 0.99))]


def percentiles(samples_s: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples_s)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"p50 {statistics.median(ms):6.2f} ms  p99 {p99:6.2f} ms  (n={len(ms)})"


def rss_mb(pid: int) -> tuple[float, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status)[1]) / 1024
    hwm = int(re.search(r"VmHWM:\s+(\d+)", status)[1]) / 1024
    return rss, hwm


def wait_sync(
    log: Path, pattern: str, timeout_s: float, good: Callable[[re.Match], bool] = bool
) -> re.Match:
    """The first line of the hub's log matching `pattern` for which `good` holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text()
        for found in re.finditer(pattern, text):
            if good(found):
                return found
        if "could not list" in text or "could not sync" in text:
            raise RuntimeError(f"the hub's sync failed: {text[-2000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"no sync line {pattern!r}: {log.read_text()[-2000:]}")


def alert_body(i: int, pod: str, namespace: str) -> dict:
    return {
        "version": "4", "receiver": "bench", "status": "firing",
        "alerts": [{"status": "firing", "fingerprint": f"bench-{i}",
                    "labels": {"alertname": "Bench", "pod": pod, "namespace": namespace}}],
    }  # fmt: skip


async def storm(url: str, bodies: list[dict], clients: int) -> float:
    queue = list(bodies)
    async with httpx.AsyncClient(timeout=30) as client:

        async def sender() -> None:
            while queue:
                body = queue.pop()
                answer = await client.post(url, json=body)
                assert answer.status_code == 202, answer.text

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(clients)))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=10_000)
    parser.add_argument("--sidecars", type=int, default=500)
    parser.add_argument("--seed", type=Path, help="a real snapshot.json (default: capture one)")
    parser.add_argument("--requests", type=int, default=200, help="per listing query")
    parser.add_argument(
        "--bucket",
        choices=["s3", "file"],
        default="s3",
        help="s3: moto's S3 server on loopback; file: a file:// bucket (no S3 server in the way)",
    )
    parser.add_argument(
        "--no-manifests", action="store_true", help="sidecars that write no manifest"
    )
    args = parser.parse_args()
    rng = random.Random(15)
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp:
        work = Path(tmp)
        try:
            run(args, work, rng, procs)
        finally:
            for proc in reversed(procs):
                stop(proc)


def run(args, work: Path, rng: random.Random, procs: list) -> None:
    import s3fs

    seed = args.seed or real_snapshot(work)
    template = json.loads(seed.read_text())
    print(f"seed snapshot {template['id']}: {seed.stat().st_size / 1024:.1f} KiB of JSON")

    now = datetime.now(UTC)
    if args.bucket == "s3":
        s3_port = free_port()
        moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
            stdout=(work / "moto.log").open("w"), stderr=subprocess.STDOUT, env=env(),
        )  # fmt: skip
        procs.append(moto)
        endpoint = f"http://127.0.0.1:{s3_port}"
        wait_http(f"{endpoint}/moto-api/", moto)
        options = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET}
        fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, **options)
        fs.mkdir(BUCKET)
        prefix, store_url = f"{BUCKET}/fleet", f"s3://{BUCKET}/fleet"
    else:
        import fsspec

        options = {}
        fs = fsspec.filesystem("file")
        prefix = str(work / "bucket")
        store_url = f"file://{prefix}"
    started = time.perf_counter()
    docs = fill_made(
        fs,
        prefix,
        args.bucket == "file",
        lambda i: fleet_doc(template, i, args.sidecars, now, rng),
        args.snapshots,
    )
    print(
        f"bucket ({args.bucket}): {len(docs)} snapshot.json written in "
        f"{time.perf_counter() - started:.1f} s"
    )
    if not args.no_manifests:
        started = time.perf_counter()
        size = write_manifests(store_url, options, docs)
        print(
            f"{args.sidecars} manifests ({size / 2**20:.1f} MiB gzipped) written in "
            f"{time.perf_counter() - started:.1f} s"
        )

    # The hub.
    hub_port = free_port()
    hub_log = work / "hub.log"
    hub_env = {
        **env(),
        "PROFILER_STORE_URL": store_url,
        "PROFILER_STORE_OPTIONS": json.dumps(options),
        "PROFILER_HUB_SYNC_INTERVAL_S": "30",  # the default
        # Every sync lists the whole bucket (deletions, old ids): what this bench measures; the
        # syncs from a cursor are bench_hub_database.py's.
        "PROFILER_HUB_FULL_SYNC_INTERVAL_S": "30",
        "PROFILER_HUB_SIDECAR_TTL_S": "3600",
        "PROFILER_HUB_TOKEN": "bench-hub",
    }
    hub = subprocess.Popen(
        [sys.executable, "-m", "profiler_service.cli", "hub", "--store", str(work / "hub"),
         "--port", str(hub_port)],
        stdout=hub_log.open("w"), stderr=subprocess.STDOUT, env=hub_env,
    )  # fmt: skip
    procs.append(hub)
    hub_url = f"http://127.0.0.1:{hub_port}"
    wait_http(f"{hub_url}/healthz", hub)
    first = wait_sync(
        hub_log, rf"{WHOLE.format(args.snapshots)}, (\d+) indexed, 0 dropped in ([\d.]+) s "
        r"\(listing ([\d.]+) s, reading ([\d.]+) s; (\d+) from (\d+) manifests\)",
        1800,
    )  # fmt: skip
    rss, hwm = rss_mb(hub.pid)
    took = float(first[2])
    record(
        f"hub: first sync of {args.snapshots} snapshots ({args.bucket})",
        took,
        "< 60",
        took < 60,
        "s",
    )
    record("hub: RSS peak through the first sync", hwm, unit="MiB")
    print(
        f"first sync: {first[1]} snapshots indexed in {float(first[2]):.1f} s (listing the "
        f"bucket {float(first[3]):.1f} s, reading the files {float(first[4]):.1f} s, parsing and "
        f"indexing the rest; {first[5]} from {first[6]} manifests); hub RSS {rss:.0f} MiB after "
        f"it, peak {hwm:.0f} MiB"
    )
    index = work / "hub" / "fleet.sqlite"
    print(f"fleet index: {index.stat().st_size / 2**20:.0f} MiB on disk")

    # An incremental sync: 100 new, 10 deleted.
    fill_made(
        fs,
        prefix,
        args.bucket == "file",
        lambda i: fleet_doc(template, args.snapshots + i, args.sidecars, now, rng),
        100,
    )
    for d in docs[:10]:
        where = "plugins/profile" if d["status"] == "ready" else "failed"
        fs.rm(f"{prefix}/{where}/{d['id']}", recursive=True)
    total = args.snapshots + 100 - 10
    incremental = wait_sync(
        hub_log, rf"{WHOLE.format(total)}, 100 indexed, 10 dropped in ([\d.]+) s",
        120,
    )  # fmt: skip
    idle = wait_sync(
        hub_log,
        rf"{WHOLE.format(total)}, 0 indexed, 0 dropped in ([\d.]+) s",
        60,
    )
    print(
        f"incremental sync (100 new, 10 deleted): {float(incremental[1]):.2f} s; "
        f"a sync with nothing new: {float(idle[1]):.2f} s (listing the bucket)"
    )

    # Listing with filters.
    client = httpx.Client(base_url=hub_url, timeout=30)
    since = (now - timedelta(days=2)).isoformat()
    queries = {
        "no filter": {},
        "namespace": {"namespace": "team-07"},
        "target": {"target": "job-123"},
        "rule": {"rule": "host_bound"},
        "severity": {"severity": "critical"},
        "status=failed": {"status": "failed"},
        "namespace+rule+since": {"namespace": "team-07", "rule": "input_bound", "since": since},
        "deep page (offset 5000)": {"offset": 5000},
    }
    every: list[float] = []
    for name, params in queries.items():
        samples = []
        for _ in range(args.requests):
            t0 = time.perf_counter()
            answer = client.get("/profiles", params={"limit": 50, **params})
            samples.append(time.perf_counter() - t0)
            assert answer.status_code == 200, answer.text
        every += samples
        print(f"  GET /profiles {name:26s} {percentiles(samples)}  count={answer.json()['count']}")
    print(f"GET /profiles, every query: {percentiles(every)}")
    p99 = p99_ms(every)
    record("hub: GET /profiles with filters, p99", p99, "<= 50", p99 <= 50, "ms")
    for path in ("/fleet", "/metrics"):
        samples = []
        for _ in range(10):
            t0 = time.perf_counter()
            assert client.get(path).status_code == 200
            samples.append(time.perf_counter() - t0)
        print(f"GET {path} over {total} snapshots: {percentiles(samples)}")

    # Routing: one real sidecar among `sidecars` registered ones.
    sidecar_port = free_port()
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "profiler_service.cli", "serve", "--store", str(work / "sidecar"),
         "--port", str(sidecar_port), "--target", "job-000=grpc://127.0.0.1:1"],
        stdout=(work / "sidecar.log").open("w"), stderr=subprocess.STDOUT,
        env={**env(), "PROFILER_HUB_TOKEN": "bench-hub", "PROFILER_WEBHOOK_TOKEN": "direct",
             "PROFILER_WEBHOOK_MIN_INTERVAL_S": "86400", "PROFILER_LOOKBACK_S": "0"},
    )  # fmt: skip
    procs.append(sidecar)
    sidecar_url = f"http://127.0.0.1:{sidecar_port}"
    wait_http(f"{sidecar_url}/healthz", sidecar)
    auth = {"Authorization": "Bearer bench-hub"}
    for j in range(args.sidecars):
        url = sidecar_url if j == 0 else f"http://127.0.0.1:{free_port()}"  # never dialled
        registration = {
            "name": f"job-{j:03d}-0",
            "namespace": f"team-{j % 25:02d}",
            "pod": f"job-{j:03d}-0",
            "targets": [f"job-{j:03d}"],
            "url": url,
        }
        assert client.put(
            f"/sidecars/{registration['name']}", json=registration, headers=auth
        ).is_success
    assert client.get("/sidecars").json()["count"] == args.sidecars
    # The first alert starts a capture (the sidecar's first); the rest are throttled in memory.
    client.post("/webhooks/alertmanager", json=alert_body(-1, "job-000-0", "team-00"))
    direct = httpx.Client(
        base_url=sidecar_url, timeout=30, headers={"Authorization": "Bearer direct"}
    )
    via_hub, straight = [], []
    for i in range(400):  # interleaved, so both see the same machine
        body = alert_body(i, "job-000-0", "team-00")
        body["alerts"][0]["labels"]["profile_target"] = "job-000"  # what the hub adds
        t0 = time.perf_counter()
        answer = direct.post("/webhooks/alertmanager", json=body)
        straight.append(time.perf_counter() - t0)
        assert answer.json()["alerts"][0]["outcome"] in {"throttled", "skipped_busy"}, answer.text
        body = alert_body(10_000 + i, "job-000-0", "team-00")
        t0 = time.perf_counter()
        answer = client.post("/webhooks/alertmanager", json=body)
        via_hub.append(time.perf_counter() - t0)
        outcome = answer.json()["alerts"][0]
        assert outcome["sidecar"] == "team-00/job-000-0", outcome
    added = [h - s for h, s in zip(sorted(via_hub), sorted(straight), strict=True)]
    print(f"webhook, 1 alert, straight to the sidecar: {percentiles(straight)}")
    print(f"webhook, 1 alert, through the hub ({args.sidecars} sidecars): {percentiles(via_hub)}")
    print(f"routing adds: {percentiles(added)} (quantile by quantile)")
    added_p50 = statistics.median(added) * 1000
    record("hub: routing adds to a webhook, p50", added_p50, "<= 5", added_p50 <= 5, "ms")
    record("hub: routing adds to a webhook, p99", p99_ms(added), unit="ms")
    bodies = [alert_body(20_000 + i, "job-000-0", "team-00") for i in range(2000)]
    seconds = asyncio.run(storm(f"{hub_url}/webhooks/alertmanager", bodies, 16))
    print(f"routing throughput: {len(bodies) / seconds:.0f} alerts/s through the hub "
          f"(2,000 one-alert webhooks, 16 concurrent senders, one sidecar deciding)")  # fmt: skip
    bodies = [alert_body(30_000 + i, f"job-{(i % 499) + 1:03d}-0", "") for i in range(500)]
    for body in bodies:
        del body["alerts"][0]["labels"]["namespace"]
    seconds = asyncio.run(storm(f"{hub_url}/webhooks/alertmanager", bodies, 16))
    print(f"  (matching only, 500 alerts to unreachable sidecars: {len(bodies) / seconds:.0f}/s)")
    rss, hwm = rss_mb(hub.pid)
    print(f"hub RSS at the end: {rss:.0f} MiB (peak {hwm:.0f} MiB)")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
