"""Proof after the fix, on real jobs: each pathology we diagnose on a CPU, then its fixed twin,
captured one after the other as the same job (one target, one port) through a real sidecar. The
second snapshot names the first, says what became of its finding, and the saving it measured
agrees with what the first one predicted (in its range, or near its point).

The twins are the demo's (`profiler_service.demo.job`): the fix the finding advises, applied.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import RECORDS_MEMORY, free_port, start_job

# The input fixes' predictions are for the job's cores, free. A capture during which other work
# (another process, or the hypervisor's steal) held more than this many of the host's cores
# measured another host: such a pair is captured again, at most `RETRIES` times.
OTHERS_MAX_CORES = 0.5
RETRIES = 2
# The measured saving must agree with the prediction in AGREE of at most MEASUREMENTS pairs:
# inside its range, or within ERROR_AIM of its point (issue 48's aim for the median error). A
# range is calibrated over jobs (80 % of a corpus's fixes fall inside: test_calibration.py), so
# one job may sit outside it every time by construction; a point further than the aim off is a
# model wrong for the job. The eager and retracing ranges are a few points wide, and these
# twins are timed under the tracer, which the ranges (fitted on the jobs' own clocks) leave out.
MEASUREMENTS = 3
AGREE = 2
ERROR_AIM = 0.10

PAIRS = {
    "retracing": (
        ("--workload", "function", "--arg", "python-number"),
        ("--workload", "function", "--arg", "tensor"),
        "resolved",
    ),
    "eager_execution": (("--workload", "eager"), ("--workload", "eager", "--fixed"), "resolved"),
    "xla_recompilation": (
        ("--workload", "xla-fit", "--batches", "varying"),
        ("--workload", "xla-fit", "--batches", "fixed"),
        "resolved",
    ),
    # Python decoding, mapped in parallel and prefetched: faster by the cores it may use, still
    # waiting on its Python on a small machine.
    "input_bound": (
        ("--workload", "input-bound"),
        ("--workload", "input-bound", "--fixed"),
        None,
    ),
    # A heavy sequential tf.data map, made parallel and prefetched.
    "input_bound:pipeline": (
        ("--workload", "pipeline", "--pipeline", "sequential"),
        ("--workload", "pipeline", "--pipeline", "tuned"),
        None,
    ),
}


def capture_pair(service_factory, broken: tuple[str, ...], fixed: tuple[str, ...], env=None):
    """The two snapshots, and the most cores other work held during either capture."""
    port = free_port()
    # A store of its own: the service before it still owns its store until the test ends.
    store = Path(tempfile.mkdtemp(prefix="fix-pair-"))
    service = service_factory([f"trainer=grpc://127.0.0.1:{port}"], store=store)
    bodies, others = [], 0.0
    with service.client() as client:
        for args in (broken, fixed):
            job = start_job(*args, "--profiler-port", str(port), "--seconds", "120", env=env)
            try:
                ours = [psutil.Process(job.proc.pid), psutil.Process(service.proc.pid)]
                with cores_held_by_others(ours) as held:
                    body = client.post("/profile", params={"duration": "3s", "wait": "true"})
            finally:
                job.stop()
            body = body.json()
            assert body["status"] == "ready", body.get("error")
            bodies.append(body)
            others = max(others, held[0])
    return bodies, others


@contextlib.contextmanager
def cores_held_by_others(ours: list[psutil.Process]) -> Iterator[list[float]]:
    """Yields a list that holds, once the block ends, the cores the host spent on anything but
    `ours` and their children (this test's own process included), steal included."""

    def spent() -> float:
        processes = {}
        for process in [psutil.Process(), *ours]:
            with contextlib.suppress(psutil.NoSuchProcess):
                for p in [process, *process.children(recursive=True)]:
                    processes[p.pid] = p
        cpu = 0.0
        for p in processes.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                times = p.cpu_times()
                cpu += times.user + times.system + times.children_user + times.children_system
        return cpu

    def busy() -> float:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)

    held = [0.0]
    start, busy0, ours0 = time.monotonic(), busy(), spent()
    yield held
    wall = time.monotonic() - start
    held[0] = max(0.0, (busy() - busy0) - (spent() - ours0)) / wall


def checked_pair(pair: str, service_factory) -> tuple[bool, str]:
    """One measurement of a pair: whether its saving agreed with the prediction (and the step
    got faster beyond noise), and what it measured. What does not depend on the host's speed
    (the finding, the link between the snapshots, the status) is asserted here."""
    broken, fixed, status = PAIRS[pair]
    rule = pair.split(":")[0]
    (before, after), others = capture_pair(service_factory, broken, fixed)
    for _ in range(RETRIES if rule == "input_bound" else 0):
        if others <= OTHERS_MAX_CORES:
            break
        print(f"{pair}: other work held {others:.2f} cores during a capture: captured again")
        (before, after), others = capture_pair(service_factory, broken, fixed)
    assert rule in {f["rule"] for f in before["findings"]}, before["findings"]
    assert after["previous_id"] == before["id"] and after["verified_against"] == before["id"]
    checked = {v["rule"]: v for v in after["verification"]}[rule]
    predicted = next(f for f in before["findings"] if f["rule"] == rule)["impact"]
    lo, hi = checked["predicted_saving_range"]
    measured = checked["measured_saving_share"]
    report = (
        f"{pair}: {checked['status']}, step {checked['step_ms_before']:.3g} -> "
        f"{checked['step_ms_after']:.3g} ms; saved {measured:.0%}, predicted "
        f"{checked['predicted_saving_share']:.0%} ({lo:.0%}-{hi:.0%}) for "
        f"{checked['action'] or 'the fix'}; {predicted['basis']} "
        f"Other work held at most {others:.2f} cores."
    )
    print(report)
    if status is not None:
        assert checked["status"] == status, report
    else:  # still input-bound on a small machine, or not: either is the truth, said so
        assert checked["status"] in ("resolved", "persists"), report
    # Input fixes are held against the changes the later capture shows: both twins made the
    # map parallel and prefetched.
    seen = next((a for a in predicted["actions"] if a["action"] == checked["action"]), predicted)
    if rule == "input_bound":
        assert checked["action"] == "parallel_calls+prefetch", report
    assert checked["predicted_saving_share"] == seen["saving_share"]
    # Faster beyond noise; a capture of too few steps (a step that compiles for 1.5 s on a busy
    # machine) has no interval: one measurement that cannot agree, not an error.
    interval = after["step_change"]["change_interval_95"]
    faster = interval is not None and interval[1] < 0
    if interval is None:
        report += " No interval: too few steps captured."
    within = lo <= measured <= hi
    if within and faster:  # the snapshot's own verdict, on its saving's interval
        assert checked["prediction"] == "within", report
    close = abs(measured - checked["predicted_saving_share"]) <= ERROR_AIM
    return (within or close) and faster, report


@pytest.mark.parametrize("pair", list(PAIRS))
def test_a_fixed_twin_is_verified_against_the_prediction(pair, service_factory):
    """The saving agrees with the prediction (in its range, or within `ERROR_AIM` of its point)
    in most measurements: `AGREE` of at most `MEASUREMENTS` pairs, each on a fresh service. A
    capture's step time can be off by 2x on a shared 2-core VM with no other process busy (a
    dozen captures of the sequential pipeline here: 13.8 to 26.9 ms; of the tuned one: 7.9 to
    14.1 ms; CI once paired 14.9 with 14.1): a prediction wrong for the job fails every
    measurement, such a host fails one."""
    agreed, reports = 0, []
    while agreed < AGREE and len(reports) - agreed <= MEASUREMENTS - AGREE:
        ok, report = checked_pair(pair, service_factory)
        agreed += ok
        reports.append(("agrees: " if ok else "DISAGREES: ") + report)
    assert agreed >= AGREE, "\n".join(reports)


def test_step_temporaries_resolved_by_its_twin_saves_no_predicted_time(service_factory):
    (before, after), _ = capture_pair(
        service_factory,
        ("--workload", "temporaries", "--temporaries-mb", "64"),
        ("--workload", "temporaries", "--temporaries-mb", "1"),
        env=RECORDS_MEMORY,
    )
    assert "step_temporaries" in {f["rule"] for f in before["findings"]}, before["findings"]
    checked = {v["rule"]: v for v in after["verification"]}["step_temporaries"]
    assert checked["status"] == "resolved"
    assert checked["predicted_saving_share"] == 0.0  # a memory fix: no step time promised
