"""A webhook storm: 2,000 alerts from 50 concurrent clients against a real service process.

    .venv/bin/python bench/bench_webhooks.py [--alerts 2000] [--clients 50] [--per-request 1]

The service runs in its own process (real HTTP server, store, controller, alert log, metrics),
started by this script on a free 127.0.0.1 port. Its capturer is a stand-in: a capture holds its
target for the whole capture (it waits instead of tracing, and never dials anything), so
"busy" is deterministic and captures cost nothing; real captures of real jobs are in
tests/e2e/. Eight targets, t0..t7, matched by the `pod` label; cooldown 10 min, no global
minimum interval (so that one storm can start a capture on every target).

The storm, shuffled with a fixed seed and posted as Alertmanager v4 payloads:
    40 %  one fingerprint, about t0           -> 1 captured, the rest deduplicated
    40 %  100 fingerprints over t1..t7        -> 7 captured, the rest deduplicated or skipped_busy
    10 %  a pod no target matches             -> rejected
    10 %  resolved                            -> resolved
So exactly 8 captures, and every alert must come back with one outcome, in the answer and in
the service's own counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from bench_common import record

TARGETS = [f"t{i}" for i in range(8)]


# ---- the service process ------------------------------------------------------------------


def serve(store: Path, port: int) -> None:
    import uvicorn

    from profiler_service.api.app import create_app
    from profiler_service.capture.capturer import CaptureFailed
    from profiler_service.config import Settings
    from profiler_service.service import build_service
    from profiler_service.targets import TargetKind

    class HeldCapture:
        """Holds the target for the capture's whole deadline; never dials the address."""

        applies_tracer_levels = True

        def capture(self, job):
            threading.Event().wait(job.timeout_s)
            raise CaptureFailed("target_timeout", "bench stand-in capturer")

    settings = Settings(
        store=store,
        port=port,
        targets=" ".join(f"{t}=grpc://127.0.0.1:9" for t in TARGETS),
        webhook_target_labels="pod",
        webhook_cooldown_s=600,
        webhook_min_interval_s=0,
        duration_max_s=60,
    )
    app = create_app(build_service(settings, capturers={TargetKind.GRPC: HeldCapture()}))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_service(store: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (store.parent / "service.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(store), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the service exited: {(store.parent / 'service.log').read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the service did not answer /healthz within 60 s")


# ---- the storm -----------------------------------------------------------------------------


def alert(pod: str, fingerprint: str, status: str = "firing") -> dict:
    return {
        "status": status,
        "labels": {"alertname": "StormTest", "pod": pod, "profile": "true"},
        "annotations": {"profile_duration": "60s"},
        "startsAt": "2026-01-05T12:00:00.000000000Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": fingerprint,
    }


def make_storm(n: int, seed: int = 5) -> list[dict]:
    rng = random.Random(seed)
    same, mixed, unmatched = int(n * 0.4), int(n * 0.4), n // 10
    resolved = n - same - mixed - unmatched
    alerts = [alert("t0", "same-fingerprint") for _ in range(same)]
    for i in range(mixed):
        fp = i % 100
        alerts.append(alert(TARGETS[1 + fp % 7], f"mixed-{fp}"))
    alerts += [alert(f"unknown-{i}", f"unmatched-{i}") for i in range(unmatched)]
    alerts += [alert(TARGETS[i % 8], f"resolved-{i}", "resolved") for i in range(resolved)]
    rng.shuffle(alerts)
    return alerts


def payload(alerts: list[dict]) -> bytes:
    return json.dumps(
        {
            "version": "4",
            "groupKey": "{}:{}",
            "truncatedAlerts": 0,
            "status": "firing",
            "receiver": "profiler-service",
            "groupLabels": {},
            "commonLabels": {},
            "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093",
            "alerts": alerts,
        }
    ).encode()


async def _client(port: int, share: list[bytes], start: asyncio.Event, results: dict) -> None:
    """One client: a keep-alive HTTP/1.1 connection posting its share one after another.

    Plain asyncio streams rather than an HTTP library, so that on a small machine the 50
    clients cost little CPU next to the service and the latency measured is the service's.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await start.wait()
    for body in share:
        head = (
            "POST /webhooks/alertmanager HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        started = time.perf_counter()
        writer.write(head + body)
        status_line = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        answer = await reader.readexactly(length)
        results["latencies_s"].append(time.perf_counter() - started)
        status = int(status_line.split()[1])
        if status == 202:
            results["outcomes"] += json.loads(answer)["alerts"]
        else:
            results["errors"].append(f"{status}: {answer[:200]!r}")
    writer.close()
    await writer.wait_closed()


async def _storm(port: int, shares: list[list[bytes]]) -> tuple[dict, float]:
    results: dict = {"latencies_s": [], "outcomes": [], "errors": []}
    start = asyncio.Event()
    tasks = [asyncio.create_task(_client(port, share, start, results)) for share in shares]
    await asyncio.sleep(0.2)  # every connection open before the storm: time requests only
    started = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    return results, time.perf_counter() - started


def storm(url: str, alerts: list[dict], clients: int, per_request: int):
    bodies = [payload(alerts[i : i + per_request]) for i in range(0, len(alerts), per_request)]
    shares = [bodies[i::clients] for i in range(clients)]
    port = int(url.rsplit(":", 1)[1])
    results, wall_s = asyncio.run(_storm(port, shares))
    return results["latencies_s"], results["outcomes"], results["errors"], wall_s, len(bodies)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alerts", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--per-request", type=int, default=1, help="alerts in each payload")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return 0

    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as tmp:
        proc, url = start_service(Path(tmp) / "store")
        try:
            alerts = make_storm(args.alerts)
            latencies, outcomes, errors, wall_s, requests = storm(
                url, alerts, args.clients, args.per_request
            )
            with httpx.Client(base_url=url, timeout=30) as http:
                counts = http.get("/webhooks/alerts").json()["counts"].get("alertmanager", {})
                captured_snapshots = http.get(
                    "/profiles", params={"trigger": "webhook", "limit": 500}
                ).json()["count"]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    by_outcome = Counter(o["outcome"] for o in outcomes)
    expected_captures = 1 + 7
    unmatched = args.alerts // 10
    resolved = args.alerts - int(args.alerts * 0.4) * 2 - unmatched
    print(f"webhook storm: {args.alerts} alerts in {requests} requests from {args.clients} clients")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"  machine: {os.cpu_count()} CPUs shared by the clients and the service; load {load}")
    print(f"  outcomes answered: {dict(sorted(by_outcome.items()))}")
    print(f"  service's counts:  {dict(sorted(counts.items()))}")
    print(f"  snapshots started: {captured_snapshots} (expected {expected_captures})")
    print(
        f"  latency per request: p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"
    )
    p99 = percentile(latencies, 0.99) * 1000
    record(f"webhook storm p99 latency, {args.clients} clients", p99, unit="ms")
    record("webhook storm throughput", args.alerts / wall_s, unit="alerts/s")
    print(f"  throughput: {requests / wall_s:.0f} requests/s, {args.alerts / wall_s:.0f} alerts/s")
    checks = {
        "every request answered 202": not errors,
        "every alert has one outcome": len(outcomes) == args.alerts,
        "exactly the expected captures": by_outcome["captured"] == expected_captures
        and captured_snapshots == expected_captures,
        "rejected = unmatched": by_outcome["rejected"] == unmatched,
        "resolved recorded": by_outcome["resolved"] == resolved,
        "nothing throttled (no minimum interval)": by_outcome["throttled"] == 0,
        "the service counted the same": counts == dict(by_outcome),
        "the one-fingerprint flood captured once": sum(
            1
            for o in outcomes
            if o["fingerprint"] == "same-fingerprint" and o["outcome"] == "captured"
        )
        == 1,
    }
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    if errors:
        print(f"  first errors: {errors[:3]}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
