"""memory_growth on real jobs: a job that keeps each step's activation, measured against its own
count of the bytes it keeps; a large steady footprint with a sawtooth inside each step; and the
demo's input-bound and compute-bound jobs, which must stay silent."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from helpers import RECORDS_MEMORY, RECORDS_NO_MEMORY, free_port, run_cli, start_job

from profiler_service.analysis.readers.fit import fit_line

LEAK_KB = 512


def own_rate(stats_file: Path, start: str, end: str) -> float:
    """Bytes per second the job kept, by its own count, over the capture (a second each side)."""
    t0 = datetime.fromisoformat(start).timestamp() - 1
    t1 = datetime.fromisoformat(end).timestamp() + 1
    lines = [json.loads(line) for line in stats_file.read_text().splitlines()]
    inside = [(s["time"], s["kept_bytes"]) for s in lines if t0 <= s["time"] <= t1]
    assert len(inside) >= 3, lines[-5:]
    return fit_line(inside)[0]


@pytest.fixture(scope="module")
def leaking_job(tmp_path_factory):
    stats = tmp_path_factory.mktemp("leak") / "stats.jsonl"
    job = start_job(
        "--workload",
        "memory",
        "--leak-kb-per-step",
        str(LEAK_KB),
        "--stats-file",
        str(stats),
        "--profiler-port",
        str(free_port()),
        "--seconds",
        "300",
        env=RECORDS_MEMORY,
    )
    job.stats = stats
    yield job
    job.stop()


def test_a_job_keeping_each_steps_activation_grows_at_its_own_rate(leaking_job, service_factory):
    service = service_factory([leaking_job.address])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "3s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    findings = {f["rule"]: f for f in body["findings"]}
    assert "memory_growth" in findings, body["findings"]
    evidence = findings["memory_growth"]["evidence"]

    kept_per_step = leaking_job.ready["leak_bytes_per_step"]
    assert kept_per_step == LEAK_KB * 1024
    assert evidence["bytes_per_step"] == pytest.approx(kept_per_step, rel=0.2)
    job_rate = own_rate(leaking_job.stats, body["capture_started_at"], body["capture_finished_at"])
    assert evidence["bytes_per_s"] == pytest.approx(job_rate, rel=0.2)
    assert evidence["r2"] > 0.9 and evidence["basis"] == "steps"
    # What is kept is the activation: relu(matmul), one oneDNN MatMul with the ReLU fused, one
    # per step. XProf's timeline has only 1,000 of the capture's events, so this comes from the
    # capture's own memory events.
    top = evidence["kept_allocations"][0]
    assert (top["op"], top["shape"]) == ("MatMul", f"[{LEAK_KB},256]"), evidence
    steps_in_first_half = body["summary"]["step_time"]["count"] / 2
    assert top["count"] == pytest.approx(steps_in_first_half, rel=0.25)
    assert top["bytes"] == top["count"] * kept_per_step
    assert f"`MatMul` [{LEAK_KB},256]" in findings["memory_growth"]["recommendation"]
    assert evidence["alive_at_peak"], "XProf's active allocations at the peak"
    print(
        f"memory_growth: {evidence['bytes_per_s'] / 2**20:.2f} MiB/s, "
        f"{evidence['bytes_per_step'] / 1024:.1f} KiB/step; the job's own: "
        f"{job_rate / 2**20:.2f} MiB/s, {kept_per_step / 1024:.0f} KiB/step"
    )
    [memory] = [m for m in body["summary"]["memory"] if m["allocator"] == evidence["allocator"]]
    assert (
        memory["growth"]["first_half_bytes_per_s"] > 0 < memory["growth"]["second_half_bytes_per_s"]
    )


def test_a_large_steady_footprint_with_a_sawtooth_is_not_growth(service_factory):
    job = start_job(
        "--workload",
        "memory",
        "--resident-mb",
        "1024",
        "--scratch-mb",
        "64",
        "--profiler-port",
        str(free_port()),
        "--seconds",
        "120",
        env=RECORDS_MEMORY,
    )
    try:
        service = service_factory([job.address])
        with service.client() as client:
            body = client.post("/profile", params={"duration": "3s", "wait": "true"}).json()
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    assert "memory_growth" not in {f["rule"] for f in body["findings"]}, body["findings"]
    [memory] = body["summary"]["memory"]
    # The footprint is real (1 GiB held from before the capture) and so is the sawtooth: the
    # peak stands at least one 64 MiB scratch tensor above the steps' low points.
    assert memory["alive_before_capture_bytes"] >= 2**30
    floors = [p["bytes_in_use"] for p in memory["step_floors"]]
    assert memory["peak_bytes_in_use"] - max(floors) >= 64 * 2**20
    assert max(floors) - min(floors) < 2**20
    assert abs(memory["growth"]["bytes_per_s"]) < 2**20


@pytest.mark.parametrize("job", ["input_bound_job", "compute_bound_job"])
def test_the_demo_jobs_have_no_memory_growth(job, request, service_factory):
    address = request.getfixturevalue(job).address
    service = service_factory([address])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    assert "memory_growth" not in {f["rule"] for f in body["findings"]}, body["findings"]
    if job == "compute_bound_job":
        # Silent by decision, not for want of data: its low points wander but do not climb.
        [memory] = body["summary"]["memory"]
        assert memory["growth"]["points"] >= 10
        assert body["summary"]["memory_unrecorded"] is None


def test_a_job_whose_allocator_records_nothing_is_told_why_and_what_to_set(service_factory):
    """The same compute-bound job as the session's, with the allocator of a CPU without AVX-512
    and nothing set: silent for want of data, and the snapshot, report and CLI say so."""
    job = start_job(
        *("--workload", "compute-bound", "--profiler-port", str(free_port()), "--seconds", "120"),
        env=RECORDS_NO_MEMORY,
    )
    try:
        service = service_factory([job.address])
        with service.client() as client:
            body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
            report = client.get(f"/profiles/{body['id']}/report").text
            cli = run_cli("analyze", str(service.store / "plugins" / "profile" / body["id"]))
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    summary = body["summary"]
    assert summary["memory"] == [] and summary["step_time"]["count"] > 0
    missing = summary["memory_unrecorded"]
    assert missing["hosts"] == summary["hosts"]
    assert "recorded no memory events" in missing["why"]
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in missing["remedy"]
    assert "before TensorFlow is imported" in missing["remedy"]
    assert "BFC allocator" in missing["cost"]
    assert not {"memory_growth", "step_temporaries"} & {f["rule"] for f in body["findings"]}
    assert 'id="memory-unrecorded"' in report and "TF_CPU_ALLOCATOR_USE_BFC=true" in report
    assert cli.returncode == 0, cli.stderr
    assert "memory: no allocator events" in cli.stdout
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in cli.stdout
