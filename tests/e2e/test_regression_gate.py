"""Comparisons and the CI gate on real captures: same job twice, a deliberately slower one, and
one that reads a larger batch.

The slower job's reader takes eight times as long a record (a 16 ms sleep, not 2 ms, which a
busy CPU does not lengthen) at the same batch, and the snapshots count the records: their
Python decoder calls a step (31.5-32.6 seen). Its step time was 7.9-9.0x the fast job's and its
input time 8.2-9.3x with eight times the records a step (idle and beside a process burning a
core); asked: more than 3x. The larger batch's job reads eight times the records a step at
the same speed, and its markers say so (`ProfilerStepCallback(examples=256)`): compared by time
per example it is no regression, though its step is several times longer. The same job twice
is asked to stay within 50 %, not the gate's 10 %: two captures seconds apart, whose ratio was
0.93-1.06 here, on a machine that other work shares and can load between them. The gate's own
110 % is tested where no load reaches it: on copies of a real snapshot with its step time set
to 109 % and 112 % of the baseline's, and on a snapshot against itself with the sidecar's
default threshold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import QUIET_TF, free_port, start_job

from profiler_service.analysis.readers.op_stats import PYTHON_OP_TYPES

FAST_RECORDS = 32  # a step of the session's input-bound job (the demo job's default batch)
LARGE_BATCH = 8 * FAST_RECORDS
SLOW_DECODE_MS = 8 * 2.0  # the demo's reader: 2 ms a record


@pytest.fixture(scope="module")
def slow_job():
    """The input-bound job with a reader 8x slower a record (a regression to catch)."""
    job = start_job(
        *("--workload", "input-bound", "--decode-ms", str(SLOW_DECODE_MS)),
        *("--profiler-port", str(free_port())),
    )
    yield job
    job.stop()


@pytest.fixture(scope="module")
def large_batch_job():
    """The input-bound job reading 8x the records a step at the same speed (no regression)."""
    job = start_job(
        *("--workload", "input-bound", "--batch-size", str(LARGE_BATCH)),
        *("--profiler-port", str(free_port())),
    )
    yield job
    job.stop()


def gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "profiler_service.cli", "compare", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **QUIET_TF},
    )


def records_per_step(snapshot: dict) -> float:
    """The job's Python decoder calls (one a record) a step, as the snapshot's top ops count."""
    summary = snapshot["summary"]
    calls = sum(op["occurrences"] for op in summary["top_ops"] if op["type"] in PYTHON_OP_TYPES)
    return calls / summary["step_time"]["count"]


def with_step_time(snapshot_dir: Path, share: float, path: Path) -> str:
    """A copy of a snapshot whose step time is `share` of the original's, every step at that
    average: the gate decides on the interval of the change (verification.py), which a real
    capture's step-to-step noise can widen past the limit; these copies test the limit."""
    snapshot = json.loads((snapshot_dir / "snapshot.json").read_text())
    step_time = snapshot["summary"]["step_time"]
    step_time["avg_ms"] *= share
    for step in step_time["steps"]:
        step["step_time_ms"] = step_time["avg_ms"]
    path.write_text(json.dumps(snapshot))
    return str(path)


def test_same_job_twice_is_no_regression_and_a_slower_reader_is(
    input_bound_job, slow_job, service_factory, tmp_path
):
    service = service_factory([f"fast={input_bound_job.address}", f"slow={slow_job.address}"])
    with service.client() as client:

        def capture(target: str, duration: str = "2s") -> dict:
            body = client.post(
                "/profile", params={"duration": duration, "wait": "true", "target": target}
            ).json()
            assert body["status"] == "ready", body.get("error")
            return body

        # The slow job's steps take ~650 ms: 4 s holds enough of them.
        first, second, slow = capture("fast"), capture("fast"), capture("slow", "4s")
        # The work a step, counted: the records each job was told to read.
        for snapshot in (first, second, slow):
            assert records_per_step(snapshot) == pytest.approx(FAST_RECORDS, rel=0.25)

        # The gate's own threshold, 10 % by default, on a snapshot against itself: exactly 1.
        itself = client.get(
            f"/profiles/{first['id']}/compare", params={"baseline": first["id"]}
        ).json()
        assert itself["max_regression"] == pytest.approx(0.10)
        assert itself["metrics"]["step_time"]["head"] == itself["metrics"]["step_time"]["base"]
        assert itself["regressed"]["step_time"] is False

        # Two real captures of the same job: a band that load between them does not cross.
        same = client.get(
            f"/profiles/{second['id']}/compare",
            params={"baseline": first["id"], "max_regression": "50%"},
        ).json()
        assert (
            0.67 < same["metrics"]["step_time"]["head"] / same["metrics"]["step_time"]["base"] < 1.5
        )
        assert same["regressed"]["step_time"] is False

        worse = client.get(
            f"/profiles/{slow['id']}/compare", params={"baseline": first["id"]}
        ).json()
        ratio = worse["metrics"]["step_time"]["head"] / worse["metrics"]["step_time"]["base"]
        assert ratio > 3, ratio  # 8x the time a record; the step is mostly waiting on them
        assert worse["regressed"]["step_time"] is True
        assert worse["max_regression"] == pytest.approx(0.10)
        # The time went to input, which is where the slower reader is.
        input_ms = worse["step_breakdown_ms"]["input_ms"]
        assert input_ms["head"] > 3 * input_ms["base"], input_ms
        assert "different targets: fast vs slow" in worse["notes"]

        better = client.get(
            f"/profiles/{first['id']}/compare", params={"baseline": slow["id"]}
        ).json()
        assert better["regressed"]["step_time"] is False
        assert better["metrics"]["step_time"]["head"] < better["metrics"]["step_time"]["base"]

    store = service.store / "plugins" / "profile"
    ok = gate(str(store / first["id"]), str(store / second["id"]), "--max-regression", "50%")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ok: step_time" in ok.stdout
    # The gate's own 110 % (its default), on copies of a real snapshot: no load moves these.
    base = with_step_time(store / first["id"], 1.0, tmp_path / "100.json")
    within = gate(base, with_step_time(store / first["id"], 1.09, tmp_path / "109.json"))
    assert within.returncode == 0, within.stdout + within.stderr
    assert "ok: step_time is 109.0% of the baseline (limit 110%)" in within.stdout
    past = gate(base, with_step_time(store / first["id"], 1.12, tmp_path / "112.json"))
    assert past.returncode == 1, past.stdout + past.stderr
    assert "REGRESSION: step_time is 112.0% of the baseline (limit 110%)" in past.stdout
    bad = gate(first["id"], slow["id"], "--url", service.url, "--max-regression", "10%")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "REGRESSION: step_time" in bad.stdout
    assert "step_time" in bad.stdout.splitlines()[2] and bad.stdout.splitlines()[2].endswith("<-")


def test_a_larger_batch_is_compared_by_time_per_example(
    input_bound_job, large_batch_job, service_factory
):
    service = service_factory(
        [f"fast={input_bound_job.address}", f"large={large_batch_job.address}"]
    )
    with service.client() as client:
        bodies = []
        for target, duration in (("fast", "2s"), ("large", "4s")):  # its steps take ~600 ms
            body = client.post(
                "/profile", params={"duration": duration, "wait": "true", "target": target}
            ).json()
            assert body["status"] == "ready", body.get("error")
            bodies.append(body)
        small, large = bodies
        # The markers carry each job's batch, and the work a step is counted to agree.
        assert small["summary"]["step_time"]["examples_per_step"] == FAST_RECORDS
        assert large["summary"]["step_time"]["examples_per_step"] == LARGE_BATCH
        assert records_per_step(large) == pytest.approx(LARGE_BATCH, rel=0.25)
        compared = client.get(
            f"/profiles/{large['id']}/compare", params={"baseline": small["id"]}
        ).json()
    steps = compared["metrics"]["step_time"]
    assert steps["head"] / steps["base"] > 3  # each step is several times longer...
    assert compared["regressed"]["step_time"] is False  # ...but no slower per example
    assert any("32 -> 256 examples a step" in note for note in compared["notes"]), compared
    ok = gate(small["id"], large["id"], "--url", service.url, "--max-regression", "10%")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ok: step_time per example is " in ok.stdout


def test_baseline_of_a_target_is_used_by_default_and_exported(input_bound_job, service_factory):
    service = service_factory([f"trainer={input_bound_job.address}"], {"PROFILER_API_TOKEN": "t"})
    auth = {"Authorization": "Bearer t"}
    with service.client(headers=auth) as client:
        base = client.post(
            "/profile", params={"duration": "1s", "wait": "true", "label": "model_version=v1"}
        ).json()
        assert base["trigger"]["labels"] == {"model_version": "v1"}
        no_baseline = client.get(f"/profiles/{base['id']}/compare")
        assert no_baseline.status_code == 404 and no_baseline.json()["error"] == "no_baseline"

        pinned = client.put(f"/profiles/{base['id']}/baseline")
        assert pinned.status_code == 200
        assert pinned.json()["key"] == "target:trainer" and pinned.json()["pinned"]
        assert client.get("/baselines").json() == {"target:trainer": base["id"]}

        head = client.post("/profile", params={"duration": "1s", "wait": "true"}).json()
        comparison = client.get(f"/profiles/{head['id']}/compare").json()
        assert comparison["base_id"] == base["id"] and comparison["head_id"] == head["id"]

        report = client.get(f"/profiles/{head['id']}/report", params={"baseline": base["id"]})
        assert report.status_code == 200 and f"Compared with {base['id']}" in report.text

        metrics = httpx.get(f"{service.url}/metrics").text
        line = next(
            ln
            for ln in metrics.splitlines()
            if ln.startswith("profiler_latest_step_time_regression_ratio{")
        )
        assert f'baseline="{base["id"]}"' in line and 'target="trainer"' in line
        ratio = float(line.rsplit(" ", 1)[1])
        expected = head["summary"]["step_time"]["avg_ms"] / base["summary"]["step_time"]["avg_ms"]
        assert ratio == pytest.approx(expected, rel=1e-6)

        bad_label = client.put(f"/profiles/{base['id']}/baseline", params={"label": "no-equals"})
        assert bad_label.status_code == 422 and bad_label.json()["error"] == "invalid_request"


def test_gate_cannot_judge_a_snapshot_without_analysis(service_factory, tmp_path):
    service = service_factory([f"grpc://127.0.0.1:{free_port()}"])
    with service.client() as client:
        answer = client.post("/profile", params={"duration": "500ms", "wait": "true"})
    assert answer.status_code == 502, answer.text
    failed = answer.json()["snapshot"]
    assert failed["status"] == "failed"
    result = gate(failed["id"], failed["id"], "--store", str(service.store))
    assert result.returncode == 2
    assert "cannot gate" in result.stderr
