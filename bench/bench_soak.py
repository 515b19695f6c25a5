"""A soak: thousands of captures back to back through a real sidecar beside a real job.

    .venv/bin/python bench/bench_soak.py [--captures 1000] [--duration 100ms] [--sample-every 50]
                                         [--retention 100] [--max-minutes 120]

A real `profiler-service serve` beside a real Keras job (the input-bound demo), with retention on
(`--retention` snapshots kept) and a schedule every 10 s. The bench asks for `--captures`
captures, one after the other, half through `POST /profile` and half as Alertmanager alerts
(each its own fingerprint); after every `--schedule-every` of them it leaves the target idle
until the schedule's next capture has begun and ended. A request that finds the
target busy waits for the capture in the way and asks again. It stops early after
`--max-minutes`, and says so.

Every `--sample-every` captures: the sidecar's RSS, open files, threads and child processes, and
its warm analysis workers' RSS (psutil). Reported: each one's least-squares slope per 1,000
captures after the warm-up (the first two samples), beside the spread of the samples around
that line (what "beyond noise" is measured against), and the slope over the second half alone:
bounded caches (the alert log's last 1,000 outcomes, SQLite's page cache, pydantic's string
cache) fill over the first hundreds of captures, and a leak is what still grows after.

Then the accounting, from what the bench saw and what the sidecar counted
(`profiler_captures_total`): requested = ready + failed, each failure with an error code; no
snapshot missing, none twice; retention kept exactly the newest `--retention` snapshots (listed
and on disk). Nothing is asserted on time; the accounting's mismatches are printed and make the
exit status 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
from bench_common import free_port, record, role, rss, start_job, start_service

MIB = 2**20
TARGET = "trainer"
IN_FLIGHT = {"capturing", "analyzing"}
WARMUP_SAMPLES = 2


@dataclass
class Soak:
    """What the bench asked for and saw: each snapshot's trigger and final status."""

    trigger: dict[str, str] = field(default_factory=dict)  # id -> api | webhook | schedule
    status: dict[str, str] = field(default_factory=dict)  # id -> ready | failed
    error_code: dict[str, str | None] = field(default_factory=dict)
    created_at: dict[str, str] = field(default_factory=dict)
    by_fingerprint: Counter[str] = field(default_factory=Counter)
    busy_retries: int = 0
    samples: list[dict[str, float]] = field(default_factory=list)


def alert(fingerprint: str) -> dict:
    """One firing Alertmanager alert (webhook version 4) for the sidecar's target."""
    now = datetime.now(UTC).isoformat()
    return {
        "version": "4",
        "status": "firing",
        "receiver": "profiler",
        "groupKey": '{}:{alertname="SoakAlert"}',
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "SoakAlert", "profile_target": TARGET},
                "annotations": {},
                "startsAt": now,
                "fingerprint": fingerprint,
            }
        ],
    }


def ask(client: httpx.Client, kind: str, n: int, duration: str, soak: Soak) -> str | None:
    """One capture through the API or as an alert: its id, or None when the target was busy."""
    if kind == "api":
        answer = client.post("/profile", params={"duration": duration, "target": TARGET})
        if answer.status_code == 409:
            return None
        answer.raise_for_status()
        return answer.json()["id"]
    fingerprint = f"soak-{n:08d}"
    answer = client.post("/webhooks/alertmanager", json=alert(fingerprint))
    answer.raise_for_status()
    [outcome] = answer.json()["alerts"]
    if outcome["outcome"] == "skipped_busy":
        return None
    if outcome["outcome"] != "captured":
        raise RuntimeError(f"alert {fingerprint}: {outcome}")
    soak.by_fingerprint[fingerprint] += 1
    return outcome["snapshot_id"]


def finish(client: httpx.Client, snapshot_id: str, soak: Soak, timeout_s: float = 600) -> None:
    """Wait for one snapshot's end and note it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/profiles/{snapshot_id}").json()
        if body.get("status") not in IN_FLIGHT:
            break
        time.sleep(0.05)
    soak.status[snapshot_id] = body.get("status", "missing")
    soak.error_code[snapshot_id] = (body.get("error") or {}).get("code")
    soak.created_at[snapshot_id] = body.get("created_at", "")


def wait_idle(client: httpx.Client, soak: Soak) -> None:
    """A request found the target busy (a scheduled capture): note the ones in flight, and wait
    for them to end."""
    for status in IN_FLIGHT:
        for item in client.get("/profiles", params={"status": status}).json()["data"]:
            soak.trigger.setdefault(item["id"], item["trigger"]["kind"])
            finish(client, item["id"], soak)


def note_scheduled(client: httpx.Client, soak: Soak) -> None:
    """Scheduled captures seen in the listing (the newest, before retention could evict them)."""
    page = client.get("/profiles", params={"trigger": "schedule", "limit": 20}).json()["data"]
    for item in page:
        if item["id"] not in soak.trigger:
            soak.trigger[item["id"]] = "schedule"


def wait_for_schedule(client: httpx.Client, soak: Soak, timeout_s: float = 25) -> None:
    """Leave the target idle until the schedule's next capture begins, and see it end: back to
    back requests would otherwise find it busy at every due time (a busy schedule skips)."""
    known = {i for i, kind in soak.trigger.items() if kind == "schedule"}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        note_scheduled(client, soak)
        new = [i for i, kind in soak.trigger.items() if kind == "schedule" and i not in known]
        if new:
            for snapshot_id in new:
                finish(client, snapshot_id, soak)
            return
        time.sleep(0.2)


def sample(sidecar: psutil.Process, captures: int) -> dict[str, float]:
    children = sidecar.children(recursive=True)
    workers = [c for c in children if role(c) == "analysis"]
    return {
        "captures": captures,
        "rss_mib": rss(sidecar) / MIB,
        "open_files": sidecar.num_fds(),
        "threads": sidecar.num_threads(),
        "children": len(children),
        "workers": len(workers),
        "worker_rss_mib": sum(rss(w) for w in workers) / MIB,
    }


def slope_per_1000(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope per 1,000 captures, and the residuals' standard deviation."""
    if len(xs) < 3:
        return float("nan"), float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    residuals = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys, strict=True)]
    return slope * 1000, statistics.pstdev(residuals)


def account(client: httpx.Client, store: Path, soak: Soak, retention: int) -> list[str]:
    """Every mismatch between what was asked, what ended and what retention kept."""
    problems = []
    for snapshot_id, status in soak.status.items():
        if status not in ("ready", "failed"):
            problems.append(f"{snapshot_id} ended {status}")
        elif status == "failed" and not soak.error_code[snapshot_id]:
            problems.append(f"{snapshot_id} failed without a code")
    untracked = set(soak.trigger) - set(soak.status)
    problems += [f"{i} never seen to end" for i in sorted(untracked)]
    doubled = [f for f, n in soak.by_fingerprint.items() if n > 1]
    problems += [f"alert {f} captured {soak.by_fingerprint[f]} times" for f in doubled]
    metrics = client.get("/metrics").text
    counted: Counter[str] = Counter()
    for line in metrics.splitlines():
        if line.startswith("profiler_captures_total{"):
            labels, value = line.rsplit(" ", 1)
            kind = labels.split('trigger="', 1)[1].split('"', 1)[0]
            counted[kind] += int(float(value))
    seen = Counter(soak.trigger.values())
    for kind in sorted(set(counted) | set(seen)):
        if counted[kind] != seen[kind]:
            problems.append(f"{kind}: the sidecar counted {counted[kind]}, the bench {seen[kind]}")
    listed = client.get("/profiles", params={"limit": 500}).json()
    ids = [item["id"] for item in listed["data"]]
    if len(ids) != len(set(ids)):
        problems.append("the listing holds an id twice")
    newest = sorted(soak.status, key=lambda i: (soak.created_at[i], i))[-retention:]
    if listed["count"] != len(newest) or set(ids) != set(newest):
        problems.append(
            f"retention kept {listed['count']} ({len(set(ids) - set(newest))} not among the "
            f"newest {retention}, {len(set(newest) - set(ids))} of those missing)"
        )
    on_disk = {p.name for p in (store / "plugins" / "profile").iterdir()}
    ready = {i for i in ids if soak.status.get(i) == "ready"}
    if on_disk != ready:
        problems.append(f"runs on disk {len(on_disk)}, ready snapshots listed {len(ready)}")
    return problems


def run(args: argparse.Namespace) -> int:
    job_port, port = free_port(), free_port()
    store = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    job = start_job(job_port, "input-bound", seconds=args.max_minutes * 60 + 600)
    schedule = [{"target": TARGET, "interval_s": 10, "duration_s": 0.1}]
    env = {
        "PROFILER_RETENTION_MAX_COUNT": str(args.retention),
        "PROFILER_SCHEDULES": json.dumps(schedule),
        "PROFILER_WEBHOOK_COOLDOWN_S": "0",
        "PROFILER_WEBHOOK_MIN_INTERVAL_S": "0",
    }
    service = start_service(store, f"{TARGET}=grpc://127.0.0.1:{job_port}", port, env)
    sidecar = psutil.Process(service.pid)
    soak = Soak()
    started = time.monotonic()
    stop_at = started + args.max_minutes * 60
    done = 0
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            soak.samples.append(sample(sidecar, 0))
            while done < args.captures and time.monotonic() < stop_at:
                kind = "api" if done % 2 == 0 else "webhook"
                snapshot_id = ask(client, kind, done, args.duration, soak)
                if snapshot_id is None:
                    soak.busy_retries += 1
                    wait_idle(client, soak)
                    continue
                soak.trigger[snapshot_id] = kind
                finish(client, snapshot_id, soak)
                note_scheduled(client, soak)
                done += 1
                if done % args.schedule_every == 0:
                    wait_for_schedule(client, soak)
                if done % args.sample_every == 0:
                    soak.samples.append(sample(sidecar, done))
                    last = soak.samples[-1]
                    print(
                        f"{done:>6} captures, {time.monotonic() - started:>6.0f} s: "
                        f"RSS {last['rss_mib']:.1f} MiB, {last['open_files']:.0f} files, "
                        f"{last['threads']:.0f} threads, {last['children']:.0f} children, "
                        f"workers {last['worker_rss_mib']:.0f} MiB",
                        flush=True,
                    )
            time.sleep(1)  # a scheduled capture that began meanwhile
            wait_idle(client, soak)
            note_scheduled(client, soak)
            for snapshot_id in [i for i in soak.trigger if i not in soak.status]:
                finish(client, snapshot_id, soak)
            problems = account(client, store, soak, args.retention)
    finally:
        service.terminate()
        service.wait(60)
        job.terminate()
        job.wait(30)
        shutil.rmtree(store, ignore_errors=True)
    took = time.monotonic() - started
    report(args, soak, done, took, problems)
    return 1 if problems else 0


def report(args: argparse.Namespace, soak: Soak, done: int, took: float, problems: list) -> None:
    statuses = Counter(soak.status.values())
    kinds = Counter(soak.trigger.values())
    codes = Counter(c for c in soak.error_code.values() if c)
    stopped = "" if done >= args.captures else f" (stopped at --max-minutes {args.max_minutes})"
    print(
        f"\n{done} captures asked in {took / 60:.1f} min{stopped}; {len(soak.trigger)} snapshots "
        f"in all ({dict(kinds)}); {soak.busy_retries} requests found the target busy and "
        f"asked again\nended: {dict(statuses)}; failure codes: {dict(codes) or 'none'}"
    )
    used = soak.samples[WARMUP_SAMPLES:]
    late = soak.samples[len(soak.samples) // 2 :]  # bounded caches (alert log, ...) filled
    xs = [s["captures"] for s in used]
    print(
        f"\n{'per 1,000 captures':<22} {'first':>8} {'last':>8} {'slope':>9} {'noise':>8} "
        f"{'2nd half':>9}"
    )
    for name, unit in (
        ("rss_mib", "MiB"),
        ("open_files", ""),
        ("threads", ""),
        ("children", ""),
        ("worker_rss_mib", "MiB"),
    ):
        ys = [s[name] for s in used]
        slope, noise = slope_per_1000(xs, ys)
        late_slope, _ = slope_per_1000([s["captures"] for s in late], [s[name] for s in late])
        first, last = soak.samples[0][name], soak.samples[-1][name]
        print(
            f"{name:<22} {first:>8.1f} {last:>8.1f} {slope:>+9.2f} {noise:>8.2f} "
            f"{late_slope:>+9.2f} {unit}"
        )
        if name == "rss_mib":
            record("soak: sidecar RSS slope per 1,000 captures", slope, unit="MiB")
            record(
                "soak: sidecar RSS slope per 1,000 captures, 2nd half",
                late_slope,
                aim="< 1 MiB",
                met=late_slope < 1,
                unit="MiB",
            )
        elif name in ("open_files", "threads", "children"):
            record(f"soak: {name.replace('_', ' ')} slope per 1,000 captures", slope)
    record(
        "soak: snapshots unaccounted (missing, doubled, retention)",
        len(problems),
        aim="0",
        met=not problems,
    )
    print(f"\naccounting: {'all accounted for' if not problems else 'MISMATCHES:'}")
    for problem in problems:
        print(f"  {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", type=int, default=1000, help="API and webhook captures")
    parser.add_argument("--duration", default="100ms", help="each capture's duration")
    parser.add_argument("--sample-every", type=int, default=50, help="captures between samples")
    parser.add_argument("--retention", type=int, default=100, help="PROFILER_RETENTION_MAX_COUNT")
    parser.add_argument(
        "--schedule-every", type=int, default=10, help="captures between scheduled ones"
    )
    parser.add_argument("--max-minutes", type=float, default=120, help="stop asking after this")
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
