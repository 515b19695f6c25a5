"""The agent embedded in a training process captures that process while Keras `fit` runs."""

from __future__ import annotations

import httpx
import pytest
from helpers import start_job, wait_for_status

from profiler_service import agent


def test_agent_captures_its_own_keras_fit(tmp_path):
    store = tmp_path / "store"
    job = start_job("--workload", "input-bound", "--agent", "--store", str(store))
    try:
        url = job.ready["agent_url"]
        with httpx.Client(base_url=url, timeout=120) as client:
            accepted = client.post("/profile", params={"duration": "2s"})
            assert accepted.status_code == 202
            busy = client.post("/profile", params={"duration": "2s"})
            assert busy.status_code == 409 and busy.json()["error"] == "capture_in_progress"
            body = wait_for_status(client, accepted.json()["id"], {"ready", "failed"})
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    assert body["target"] == "local" and body["workers"] == []
    # TF 2.21 ignores tracer levels in-process; the snapshot says so instead of pretending.
    assert body["capture"]["options_applied"] is False
    assert body["summary"]["step_time"]["count"] >= 5  # the step callback marked fit()'s batches
    assert body["findings"][0]["rule"] == "input_bound"
    assert (
        store / "plugins" / "profile" / body["id"] / body["files"][0]["name"]
    ).stat().st_size > 0


def test_agent_stays_off_unless_its_environment_gate_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("PROFILER_ENABLE", raising=False)
    assert agent.start(port=0, store=tmp_path / "off", env_gate="PROFILER_ENABLE") is None
    assert not (tmp_path / "off").exists()

    monkeypatch.setenv("PROFILER_ENABLE", "1")
    embedded = agent.start(port=0, store=tmp_path / "on", env_gate="PROFILER_ENABLE")
    assert embedded is not None
    try:
        assert httpx.get(f"{embedded.url}/healthz").json()["status"] == "ok"
        ready = httpx.get(f"{embedded.url}/readyz").json()
        assert ready["status"] == "ready"
        assert ready["checks"] == {"store": "ok", "target:local": "ok", "loop:lookback": "ok"}
    finally:
        embedded.stop()
    assert not embedded.thread.is_alive()


# A fresh process: the agent started before TensorFlow is imported turns the CPU allocator's
# memory events on; started after it, it cannot, and says so. Either way the job's own choice
# (TF_CPU_ALLOCATOR_USE_BFC in its environment) is left alone.
AGENT_FIRST = """
import json, os, sys
import threading
import httpx
import pytest
from profiler_service import agent
embedded = agent.start(port=0, store=sys.argv[1])
from profiler_service.demo.workloads import build_model, compute_bound_dataset
from profiler_service.steps import ProfilerStepCallback
model = build_model(64)
data = compute_bound_dataset(512)
stop = threading.Event()
def train():
    while not stop.is_set():
        model.fit(data, steps_per_epoch=20, epochs=1, verbose=0, callbacks=[ProfilerStepCallback()])
trainer = threading.Thread(target=train, daemon=True)
trainer.start()
body = httpx.post(f"{embedded.url}/profile", params={"duration": "1s", "wait": "true"},
                  timeout=120).json()
stop.set()
trainer.join()
embedded.stop()
print(json.dumps({"said": embedded.memory_events,
                  "variable": os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"),
                  "status": body["status"], "summary": body.get("summary")}))
"""


def run_agent(script: str, store, env: dict[str, str]) -> dict:
    import json
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    out = subprocess.run(
        [sys.executable, "-c", script, str(store)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}


def test_the_agent_started_before_tensorflow_turns_memory_events_on(tmp_path):
    # oneDNN off: the CPU allocator of a CPU without AVX-512, which records nothing by itself.
    got = run_agent(AGENT_FIRST, tmp_path / "store", {"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert got["said"] == "turned on (TF_CPU_ALLOCATOR_USE_BFC=true)"
    assert got["variable"] == "true" and got["status"] == "ready"
    assert got["summary"]["memory"] and got["summary"]["memory_unrecorded"] is None


def test_the_agent_started_after_tensorflow_says_it_is_too_late(tmp_path):
    late = AGENT_FIRST.replace("import httpx\n", "import httpx\nimport tensorflow\n", 1)
    got = run_agent(late, tmp_path / "store", {"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert got["said"] == "too late: TensorFlow was imported first"
    assert got["variable"] is None and got["status"] == "ready"
    assert "Start the agent before importing TensorFlow" in got["stderr"]
    missing = got["summary"]["memory_unrecorded"]
    assert missing and "TF_CPU_ALLOCATOR_USE_BFC=true" in missing["remedy"]


def test_the_agent_leaves_the_jobs_own_choice(tmp_path):
    got = run_agent(
        AGENT_FIRST,
        tmp_path / "store",
        {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPU_ALLOCATOR_USE_BFC": "false"},
    )
    assert got["said"] == "left as the job set them (TF_CPU_ALLOCATOR_USE_BFC=false)"
    assert got["summary"]["memory_unrecorded"] is not None


def trained_for(job, seconds: float) -> bool:
    """Whether the job's own clock spans `seconds` of training."""
    lines = job.clock.read_bytes().split(b"\n")[:-1] if job.clock.exists() else []
    return (
        len(lines) > 1 and (int(lines[-1].split()[0]) - int(lines[0].split()[0])) / 1e9 >= seconds
    )


def test_every_capture_says_what_it_cost_the_job(tmp_path):
    """The job's own step timings while the trace ran against the seconds before: the steps
    counted during the trace are the steps XProf found in it, give or take the edges."""
    from helpers import wait_until

    job = start_job(
        "--workload", "compute-bound", "--agent", "--store", str(tmp_path / "store"),
        clock=tmp_path / "clock",
    )  # fmt: skip
    try:
        wait_until(lambda: trained_for(job, 12), 120, "12 s of training before the capture")
        with httpx.Client(base_url=job.ready["agent_url"], timeout=120) as client:
            body = client.post("/profile", params={"duration": "3s", "wait": "true"}).json()
            metrics = client.get("/metrics").text
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    cost = body["capture"]["cost"]
    assert cost["source"] == "agent", cost
    # a note only to say how to capture more cheaply, when the trace slowed the steps 10 % or more
    assert cost["note"] is None or "slowed the job's steps" in cost["note"], cost
    assert cost["steps_before"] >= 10 and cost["steps_during"] >= 5, cost
    assert 0.5 < cost["ratio"] < 5
    assert cost["ratio"] == pytest.approx(cost["step_ms_during"] / cost["step_ms_before"], 1e-3)
    traced = body["summary"]["step_time"]["count"]
    assert 0.5 * traced <= cost["steps_during"] <= 1.5 * traced + 5, (cost, traced)
    line = next(x for x in metrics.splitlines() if x.startswith("profiler_capture_cost_ratio{"))
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(cost["ratio"])
