"""A soak: thousands of captures back to back through a real sidecar beside a real job.

    .venv/bin/python bench/bench_soak.py [--captures 1000] [--duration 100ms] [--sample-every 50]
                                         [--retention 100] [--schedule-every 10]
                                         [--max-minutes 120] [--in-process [--xplane PATH ...]]

A real `profiler-service serve` beside a real Keras job (the input-bound demo), with retention on
(`--retention` snapshots kept) and a schedule every 10 s. The bench asks for `--captures`
captures, one after the other, half through `POST /profile` and half as Alertmanager alerts
(each its own fingerprint); after every `--schedule-every` of them it leaves the target idle
until the schedule's next capture has begun and ended. A request that finds the
target busy waits for the capture in the way and asks again. It stops early after
`--max-minutes`, and says so.

`--in-process`: the same pipeline without the job and the capture client, fast enough for
thousands of captures in under an hour. The service is built in the bench's process as the
tests build it (`build_service`), served by uvicorn on loopback as `serve` does, with a
capturer that replays one recorded capture: a real `--duration` capture of the input-bound demo
job, taken once through the RemoteCapturer before the soak (the job then stops), or the
`--xplane` files given. Everything after the capture is real: XProf's analysis on the warm
workers, the store, retention, the webhook's alert log and dedupe. No schedule unless
`--schedule-every` is given. The captures are asked, and the process sampled, from a child
running this script with `--drive`, so that the bench's own records of every snapshot are not in
the RSS it measures.

Every `--sample-every` captures: the sidecar's RSS, open files, threads and child processes, and
its warm analysis workers' RSS (psutil). Reported: each one's least-squares slope per 1,000
captures after the warm-up (the first two samples), beside the spread of the samples around
that line (what "beyond noise" is measured against), and the slope over the second half alone:
bounded caches (SQLite's page cache, pydantic's string cache) fill over the first hundreds of
captures, and a leak is what still grows after. The largest of them, the alert log's last 1,000
outcomes in memory (about 1.2 KB each), is filled before the first sample with resolved alerts,
as a sidecar that has run a day holds it (`--no-fill-alert-log` leaves it empty).

Then the accounting, from what the bench saw and what the sidecar counted
(`profiler_captures_total`): requested = ready + failed, each failure with an error code; no
snapshot missing, none twice; retention kept exactly the newest `--retention` snapshots (listed
and on disk). Nothing is asserted on time; the accounting's mismatches are printed and make the
exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import uvicorn
from bench_common import free_port, record, role, rss, start_job, start_service

from profiler_service.api.app import create_app
from profiler_service.capture.capturer import Captured, CaptureJob, collect_xplanes
from profiler_service.capture.remote import RemoteCapturer
from profiler_service.config import Settings
from profiler_service.durations import parse_duration
from profiler_service.models import CaptureOptions
from profiler_service.service import build_service
from profiler_service.targets import Target, TargetKind
from profiler_service.trigger.alert_log import MAX_RECORDS_IN_MEMORY

MIB = 2**20
TARGET = "trainer"
IN_FLIGHT = {"capturing", "analyzing"}
WARMUP_SAMPLES = 2
SCHEDULE = [{"target": TARGET, "interval_s": 10, "duration_s": 0.1}]


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


def alert(*fingerprints: str, status: str = "firing", duration: str | None = None) -> dict:
    """Alertmanager alerts (webhook version 4) for the sidecar's target, one a fingerprint,
    each asking for `duration` (`profile_duration`; else the sidecar's default, 5 s)."""
    labels = {"alertname": "SoakAlert", "profile_target": TARGET}
    if duration:
        labels["profile_duration"] = duration
    now = datetime.now(UTC).isoformat()
    return {
        "version": "4",
        "status": status,
        "receiver": "profiler",
        "groupKey": '{}:{alertname="SoakAlert"}',
        "alerts": [
            {
                "status": status,
                "labels": labels,
                "annotations": {},
                "startsAt": now,
                "fingerprint": fingerprint,
            }
            for fingerprint in fingerprints
        ],
    }


def fill_alert_log(client: httpx.Client, records: int, per_post: int = 100) -> None:
    """Resolved alerts (recorded, never captured) up to the alert log's bound in memory: the
    log a sidecar that has run a while holds, so that the soak's slope is not the log filling."""
    for first in range(0, records, per_post):
        n = min(per_post, records - first)
        names = [f"soak-resolved-{i:08d}" for i in range(first, first + n)]
        answer = client.post("/webhooks/alertmanager", json=alert(*names, status="resolved"))
        answer.raise_for_status()
        if {a["outcome"] for a in answer.json()["alerts"]} != {"resolved"}:
            raise RuntimeError(f"resolved alerts answered {answer.json()['alerts'][:1]}")


def ask(client: httpx.Client, kind: str, n: int, duration: str, soak: Soak) -> str | None:
    """One capture through the API or as an alert: its id, or None when the target was busy."""
    if kind == "api":
        answer = client.post("/profile", params={"duration": duration, "target": TARGET})
        if answer.status_code == 409:
            return None
        answer.raise_for_status()
        return answer.json()["id"]
    fingerprint = f"soak-{n:08d}"
    answer = client.post("/webhooks/alertmanager", json=alert(fingerprint, duration=duration))
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
    # With --in-process the sidecar is this driver's parent: the driver is not one of its own.
    children = [c for c in sidecar.children(recursive=True) if c.pid != os.getpid()]
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


def soak_through(
    base_url: str, sidecar: psutil.Process, store: Path, args: argparse.Namespace
) -> tuple[Soak, int, list[str]]:
    """Ask for `--captures` captures of the sidecar at `base_url`, one after the other, sampling
    `sidecar` every `--sample-every`; then the accounting. Returns what was seen, the captures
    asked and the mismatches."""
    soak = Soak()
    started = time.monotonic()
    stop_at = started + args.max_minutes * 60
    done = 0
    with httpx.Client(base_url=base_url, timeout=120) as client:
        if args.fill_alert_log:
            fill_alert_log(client, MAX_RECORDS_IN_MEMORY)
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
            if args.schedule_every and done % args.schedule_every == 0:
                wait_for_schedule(client, soak)
            if done % args.sample_every == 0:
                soak.samples.append(sample(sidecar, done))
                if args.tracemalloc and len(soak.samples) == WARMUP_SAMPLES + 1:
                    os.kill(sidecar.pid, signal.SIGUSR1)  # the service's baseline snapshot
                last = soak.samples[-1]
                print(
                    f"{done:>6} captures, {time.monotonic() - started:>6.0f} s: "
                    f"RSS {last['rss_mib']:.1f} MiB, {last['open_files']:.0f} files, "
                    f"{last['threads']:.0f} threads, {last['children']:.0f} children, "
                    f"workers {last['worker_rss_mib']:.0f} MiB",
                    flush=True,
                )
        if args.schedule_every:
            time.sleep(1)  # a scheduled capture that began meanwhile
        wait_idle(client, soak)
        note_scheduled(client, soak)
        for snapshot_id in [i for i in soak.trigger if i not in soak.status]:
            finish(client, snapshot_id, soak)
        problems = account(client, store, soak, args.retention)
    return soak, done, problems


def run(args: argparse.Namespace) -> int:
    """A real sidecar (`profiler-service serve`) beside a real job."""
    job_port, port = free_port(), free_port()
    store = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    job = start_job(job_port, "input-bound", seconds=args.max_minutes * 60 + 600)
    env = {
        "PROFILER_RETENTION_MAX_COUNT": str(args.retention),
        "PROFILER_WEBHOOK_COOLDOWN_S": "0",
        "PROFILER_WEBHOOK_MIN_INTERVAL_S": "0",
    }
    if args.schedule_every:
        env["PROFILER_SCHEDULES"] = json.dumps(SCHEDULE)
    service = start_service(store, f"{TARGET}=grpc://127.0.0.1:{job_port}", port, env)
    started = time.monotonic()
    try:
        soak, done, problems = soak_through(
            f"http://127.0.0.1:{port}", psutil.Process(service.pid), store, args
        )
    finally:
        service.terminate()
        service.wait(60)
        job.terminate()
        job.wait(30)
        shutil.rmtree(store, ignore_errors=True)
    report(args, soak, done, time.monotonic() - started, problems)
    return 1 if problems else 0


class Replay:
    """A capturer that writes a recorded capture's files where the profiler would
    (<logdir>/plugins/profile/<id>/), after waiting out the duration: everything after the
    capture (XProf's analysis on the warm workers, the store, retention) is real."""

    applies_tracer_levels = True

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def capture(self, job: CaptureJob) -> Captured:
        job.cancel.wait(job.options.duration_ms / 1000)
        run_dir = job.logdir / "plugins" / "profile" / job.snapshot_id
        run_dir.mkdir(parents=True)
        for name, data in self.files.items():
            (run_dir / name).write_bytes(data)
        return collect_xplanes(job)


def recorded_capture(args: argparse.Namespace) -> dict[str, bytes]:
    """`--xplane`'s files, or one real `--duration` capture of the input-bound demo job through
    the RemoteCapturer (the job stops before the soak begins)."""
    if args.xplane:
        return {path.name: path.read_bytes() for path in args.xplane}
    port = free_port()
    job = start_job(port, "input-bound", seconds=600)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-soak-record-") as tmp:
            levels = Settings(store=Path(tmp) / "unused", targets="grpc://127.0.0.1:9").capture
            seconds = parse_duration(args.duration, default_s=0.1, min_s=0.001, max_s=60)
            capture = CaptureJob(
                snapshot_id="recorded",
                target=Target(name=TARGET, workers=[f"grpc://127.0.0.1:{port}"]),
                logdir=Path(tmp),
                options=CaptureOptions(
                    duration_ms=round(seconds * 1000),
                    host_tracer_level=levels.host_tracer_level,
                    python_tracer_level=levels.python_tracer_level,
                    device_tracer_level=levels.device_tracer_level,
                ),
                attempts=3,
                timeout_s=120,
            )
            return {
                path.name: path.read_bytes() for path in RemoteCapturer().capture(capture).paths
            }
    finally:
        job.terminate()
        job.wait(30)


def run_in_process(args: argparse.Namespace) -> int:
    """The service built in this process (`build_service`, a capturer replaying a recorded
    capture), served by uvicorn on loopback; the captures asked from a child process running
    this script with `--drive`, so that the bench's own records of thousands of snapshots are
    not in the RSS measured."""
    files = recorded_capture(args)
    print(
        "replaying "
        + ", ".join(f"{name} ({len(data) / 1024:.0f} KiB)" for name, data in files.items()),
        flush=True,
    )
    baseline: list[tracemalloc.Snapshot] = []
    if args.tracemalloc:
        tracemalloc.start(8)
        signal.signal(signal.SIGUSR1, lambda *_: baseline.append(tracemalloc.take_snapshot()))
    port = free_port()
    store = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    settings = Settings(
        store=store,
        targets=f"{TARGET}=grpc://127.0.0.1:9",  # the replay sends nothing there
        retention_max_count=args.retention,
        webhook_cooldown_s=0,
        webhook_min_interval_s=0,
        analysis_timeout_s=1200,
        schedules=SCHEDULE if args.schedule_every else [],
    )
    service = build_service(settings, {TargetKind.GRPC: Replay(files)})
    config = uvicorn.Config(create_app(service), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    serving = threading.Thread(target=server.run, name="uvicorn")
    serving.start()
    result = store.parent / f"{store.name}-result.json"
    started = time.monotonic()
    try:
        while not server.started:
            if not serving.is_alive():
                raise RuntimeError("the service did not start")
            time.sleep(0.05)
        driver = subprocess.run(
            [
                *(sys.executable, __file__, "--drive", f"http://127.0.0.1:{port}"),
                *("--sidecar-pid", str(os.getpid()), "--store", str(store)),
                *("--result", str(result), "--captures", str(args.captures)),
                *("--duration", args.duration, "--sample-every", str(args.sample_every)),
                *("--retention", str(args.retention)),
                *("--schedule-every", str(args.schedule_every)),
                *("--max-minutes", str(args.max_minutes)),
                "--fill-alert-log" if args.fill_alert_log else "--no-fill-alert-log",
                *(["--tracemalloc"] if args.tracemalloc else []),
            ],
            check=False,
        )
        if driver.returncode != 0:
            raise RuntimeError(f"the driver exited {driver.returncode}")
        took = time.monotonic() - started
        body = json.loads(result.read_text())
        if baseline:
            print_growth(baseline[0], tracemalloc.take_snapshot())
    finally:
        server.should_exit = True
        serving.join(120)
        shutil.rmtree(store, ignore_errors=True)
        result.unlink(missing_ok=True)
    soak = Soak(**body["soak"])
    soak.by_fingerprint = Counter(soak.by_fingerprint)
    report(args, soak, body["done"], took, body["problems"])
    return 1 if body["problems"] else 0


def print_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int = 12) -> None:
    """What Python allocated between the end of the warm-up and the end, by allocating line:
    where a slope comes from."""
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = after.filter_traces(ignore).compare_to(before.filter_traces(ignore), "traceback")
    print(f"\ngrowth since the warm-up, by where it was allocated (tracemalloc, top {top}):")
    for stat in stats[:top]:
        newest = reversed(stat.traceback[-4:])  # the allocating line first, then its callers
        frames = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in newest)
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {frames}")


def drive(args: argparse.Namespace) -> int:
    """`--drive`: the captures and the accounting of `run_in_process`'s service, written to
    `--result`."""
    soak, done, problems = soak_through(
        args.drive, psutil.Process(args.sidecar_pid), args.store, args
    )
    body = {"soak": vars(soak), "done": done, "problems": problems}
    args.result.write_text(json.dumps(body))
    return 0


def report(args: argparse.Namespace, soak: Soak, done: int, took: float, problems: list) -> None:
    soak_kind = "soak in-process" if args.in_process else "soak"
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
            record(f"{soak_kind}: sidecar RSS slope per 1,000 captures", slope, unit="MiB")
            record(
                f"{soak_kind}: sidecar RSS slope per 1,000 captures, 2nd half",
                late_slope,
                aim="< 1 MiB",
                met=late_slope < 1,
                unit="MiB",
            )
        elif name in ("open_files", "threads", "children"):
            record(f"{soak_kind}: {name.replace('_', ' ')} slope per 1,000 captures", slope)
    record(
        f"{soak_kind}: snapshots unaccounted (missing, doubled, retention)",
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
        "--schedule-every",
        type=int,
        help="captures between scheduled ones; 0: no schedule (10; 0 with --in-process)",
    )
    parser.add_argument("--max-minutes", type=float, default=120, help="stop asking after this")
    parser.add_argument(
        "--fill-alert-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="before the first sample, fill the alert log's 1,000 records with resolved alerts",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="the service built in this process, replaying a recorded capture (no job)",
    )
    parser.add_argument(
        "--xplane",
        type=Path,
        nargs="+",
        help="with --in-process: replay these .xplane.pb files (else record one from the demo job)",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="with --in-process: print what Python allocated after the warm-up, by line (slower)",
    )
    # --in-process's driver, in a child process of its own
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("--sidecar-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.schedule_every is None:
        args.schedule_every = 0 if args.in_process else 10
    if args.drive:
        sys.exit(drive(args))
    sys.exit(run_in_process(args) if args.in_process else run(args))


if __name__ == "__main__":
    main()
