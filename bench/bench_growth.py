"""How capture-to-findings and the analysis worker's memory grow with the capture's duration.

    .venv/bin/python bench/bench_growth.py [--durations 1 5 20 60]
                                           [--workloads compute-bound input-bound]

For each workload, a real `profiler-service serve` beside a real Keras job; for each duration,
`POST /profile` and, through to findings: the latency, the trace and the analysis apart, the
`.xplane.pb` size, and the analysis worker's peak RSS (sampled every 50 ms). Then, on a fresh copy
of the same capture, XProf's own `overview_page` conversion alone, in a process at the worker's
priority beside the same running job: the aim is latency <= duration + 1.2 x that conversion.
Last, per workload, least-squares lines over the durations: analysis seconds, file bytes and
worker peak bytes per captured second (with R²), and the worker's peak at 60 s.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from bench_common import free_port, record, start_job, xprof_alone
from bench_footprint import capture_and_watch, seconds_between, start_service

from profiler_service.analysis.readers.fit import fit_line

MB = 1024 * 1024


def measure(workload: str, durations: list[float]) -> list[dict]:
    job_port, port = free_port(), free_port()
    store = Path(tempfile.mkdtemp(prefix="bench-growth-"))
    job = start_job(job_port, workload)
    service = start_service(store, f"grpc://127.0.0.1:{job_port}", port)
    sidecar = psutil.Process(service.pid)
    rows = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            time.sleep(3)  # the warm worker has imported XProf, as in a service that ran a while
            for seconds in durations:
                body, latency, peaks = capture_and_watch(client, sidecar, seconds)
                if body["status"] != "ready":
                    print(f"{workload} {seconds:g}s failed: {body.get('error')}")
                    continue
                run = store / "plugins" / "profile" / body["id"]
                rows.append(
                    {
                        "workload": workload,
                        "seconds": seconds,
                        "bytes": sum(f["size_bytes"] for f in body["files"]),
                        "latency": latency,
                        "trace": seconds_between(
                            body["capture_started_at"], body["capture_finished_at"]
                        ),
                        "analysis": seconds_between(
                            body["capture_finished_at"], body["finished_at"]
                        ),
                        "worker_peak": peaks["analysis"],
                        "xprof": xprof_alone(run),
                    }
                )
                print_row(rows[-1])
    finally:
        service.terminate()
        service.wait(30)
        job.terminate()
        job.wait(30)
        shutil.rmtree(store, ignore_errors=True)
    return rows


HEADER = (
    f"{'workload':<14} {'capture':>7} {'xplane MB':>9} {'latency s':>9} {'trace s':>7} "
    f"{'analysis s':>10} {'XProf s':>7} {'aim s':>6} {'met':>4} {'worker peak MB':>14}"
)


def print_row(r: dict) -> None:
    aim = r["seconds"] + 1.2 * r["xprof"]
    record(
        f"capture to findings, {r['workload']}, {r['seconds']:g} s capture",
        r["latency"],
        f"<= {aim:.1f} (duration + 1.2 x XProf)",
        r["latency"] <= aim,
        "s",
    )
    print(
        f"{r['workload']:<14} {r['seconds']:>6g}s {r['bytes'] / MB:>9.1f} {r['latency']:>9.1f} "
        f"{r['trace']:>7.1f} {r['analysis']:>10.1f} {r['xprof']:>7.1f} {aim:>6.1f} "
        f"{'yes' if r['latency'] <= aim else 'no':>4} {r['worker_peak'] / MB:>14.0f}",
        flush=True,
    )


def print_growth(rows: list[dict]) -> None:
    print("\ngrowth per captured second (least squares over the durations; R² in brackets)")
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        analysis, r2a = fit_line([(r["seconds"], r["analysis"]) for r in mine])
        size, r2s = fit_line([(r["seconds"], r["bytes"]) for r in mine])
        peak, r2p = fit_line([(r["seconds"], r["worker_peak"]) for r in mine])
        xprof, r2x = fit_line([(r["seconds"], r["xprof"]) for r in mine])
        base = min(mine, key=lambda r: r["seconds"])
        at60 = base["worker_peak"] + peak * (60 - base["seconds"])
        record(f"analysis time per captured second, {workload}", analysis, unit="s/s")
        record(f"worker peak RSS per captured second, {workload}", peak / MB, unit="MB/s")
        record(f"worker peak RSS at 60 s, {workload} (fitted)", at60 / MB, unit="MB")
        print(
            f"  {workload:<14} analysis {analysis:.3f} s/s ({r2a:.2f}), XProf alone "
            f"{xprof:.3f} s/s ({r2x:.2f}); xplane {size / MB:.2f} MB/s ({r2s:.2f}); "
            f"worker peak {peak / MB:.1f} MB/s ({r2p:.2f}), {at60 / MB:.0f} MB at 60 s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", type=float, nargs="+", default=[1.0, 5.0, 20.0, 60.0])
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=["compute-bound", "input-bound"],
        choices=["input-bound", "compute-bound", "eager", "memory"],
    )
    args = parser.parse_args()
    print(HEADER, flush=True)
    rows = [row for workload in args.workloads for row in measure(workload, args.durations)]
    print_growth(rows)
    print(
        "latency = POST /profile to findings stored; aim = duration + 1.2 x XProf's overview_page "
        f"alone on the same capture; {psutil.cpu_count()} cores, load "
        + " ".join(f"{x:.2f}" for x in psutil.getloadavg())
    )


if __name__ == "__main__":
    main()
