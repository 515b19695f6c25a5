"""The sidecar's footprint and capture-to-findings latency, on a real service and a real job.

    .venv/bin/python bench/bench_footprint.py [--durations 1 5 20] [--workload compute-bound]
                                              [--skip-install]

1. A real `profiler-service serve` process (the sidecar) beside a real Keras job with a profiler
   server. Its resident memory (psutil RSS) idle, then sampled every 50 ms through captures of
   growing size: the peak of the service process itself and of its worker children (the capture
   client, the XProf analysis worker), which are separate processes on purpose.
2. For each capture: the latency from `POST /profile` to findings (`ready`), split into the trace
   (capture_started_at..capture_finished_at) and the analysis after it, the `.xplane.pb` size, and
   the latency as a ratio to the capture's own duration (the floor nothing can beat).
3. The installed size without TensorFlow: `pip install .` into a fresh venv (pip uses this
   machine's configured index), then the size of its site-packages, largest packages first.
Nothing is asserted; everything is printed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import psutil
from bench_common import free_port, record, role, rss, start_job, start_service

ROOT = Path(__file__).resolve().parent.parent
MB = 1024 * 1024


def capture_and_watch(
    client: httpx.Client, sidecar: psutil.Process, seconds: float
) -> tuple[dict, float, dict[str, int]]:
    """POST /profile and wait for its end: the snapshot, the latency, and the peak RSS of the
    service and of its capture and analysis children, sampled every 50 ms."""
    peaks = {"service": 0, "capture": 0, "analysis": 0}
    started = time.monotonic()
    body = client.post("/profile", params={"duration": f"{seconds:g}s"}).json()
    snapshot_id = body["id"]
    while body.get("status") in ("capturing", "analyzing"):
        peaks["service"] = max(peaks["service"], rss(sidecar))
        for child in sidecar.children(recursive=True):
            kind = role(child)
            if kind in peaks:
                peaks[kind] = max(peaks[kind], rss(child))
        time.sleep(0.05)
        body = client.get(f"/profiles/{snapshot_id}").json()
    return body, time.monotonic() - started, peaks


def seconds_between(a: str | None, b: str | None) -> float:
    if not a or not b:
        return float("nan")
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def bench_service(durations: list[float], workload: str) -> None:
    job_port, port = free_port(), free_port()
    store = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    job = start_job(job_port, workload)
    service = start_service(store, f"grpc://127.0.0.1:{job_port}", port)
    sidecar = psutil.Process(service.pid)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for _ in range(5):
                client.get("/metrics")  # collectors loaded, as after the first Prometheus scrape
            time.sleep(2)
            idle = rss(sidecar)
            record("sidecar RSS, idle", idle / MB, unit="MB")
            print(f"sidecar idle: RSS {idle / MB:.0f} MB (one process; no TensorFlow imported)")
            print(
                f"\n{'capture':>8} {'xplane MB':>10} {'latency s':>10} {'x duration':>11} "
                f"{'trace s':>8} {'analysis s':>11} {'peak MB: service':>17} "
                f"{'capture child':>14} {'analysis worker':>16}"
            )
            for seconds in durations:
                body, latency, peaks = capture_and_watch(client, sidecar, seconds)
                if body["status"] != "ready":
                    print(f"{seconds:>7g}s failed: {body.get('error')}")
                    continue
                size = sum(f["size_bytes"] for f in body["files"]) / MB
                trace = seconds_between(body["capture_started_at"], body["capture_finished_at"])
                analysis = seconds_between(body["capture_finished_at"], body["finished_at"])
                print(
                    f"{seconds:>7g}s {size:>10.1f} {latency:>10.1f} {latency / seconds:>11.2f} "
                    f"{trace:>8.1f} {analysis:>11.1f} {peaks['service'] / MB:>17.0f} "
                    f"{peaks['capture'] / MB:>14.0f} {peaks['analysis'] / MB:>16.0f}"
                )
            time.sleep(2)
            print(f"\nsidecar after the captures: RSS {rss(sidecar) / MB:.0f} MB")
    finally:
        service.terminate()
        service.wait(30)
        job.terminate()
        job.wait(30)
        shutil.rmtree(store, ignore_errors=True)
    print(
        f"workload {workload}; latency = POST /profile to `ready` (findings stored); "
        "x duration = latency / capture duration"
    )


def bench_install() -> None:
    venv = Path(tempfile.mkdtemp(prefix="bench-install-"))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        started = time.monotonic()
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", "."],
            cwd=ROOT,
            check=True,
        )
        took = time.monotonic() - started
        site = next((venv / "lib").glob("python*/site-packages"))
        sizes: dict[str, int] = {}
        for entry in site.iterdir():
            if entry.name.endswith((".dist-info", ".pth")) or entry.name == "__pycache__":
                continue
            total = entry.stat().st_size if entry.is_file() else 0
            for p in entry.rglob("*") if entry.is_dir() else []:
                if p.is_file() and not p.is_symlink():
                    total += p.stat().st_size
            sizes[entry.name] = total
        everything = sum(
            p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink()
        )
        tf = [n for n in sizes if n.startswith(("tensorflow", "keras"))]
        print(
            f"\ninstalled (pip install . into a fresh venv, {took:.0f} s): site-packages "
            f"{everything / MB:.0f} MB; TensorFlow/Keras installed: {', '.join(tf) or 'no'}"
        )
        for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:8]:
            print(f"  {name:<28} {size / MB:>7.1f} MB")
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", type=float, nargs="+", default=[1.0, 5.0, 20.0])
    parser.add_argument(
        "--workload", default="compute-bound", choices=["input-bound", "compute-bound", "eager"]
    )
    parser.add_argument("--skip-install", action="store_true", help="skip the installed size")
    args = parser.parse_args()
    bench_service(args.durations, args.workload)
    if not args.skip_install:
        bench_install()


if __name__ == "__main__":
    main()
