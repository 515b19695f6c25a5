"""The agent inside jobs on TensorFlow 2.15 to 2.21, installed as a job installs it.

Each version gets a cached environment of its own (`scripts/compat-venv VERSION`:
tensorflow-cpu and `profiler-service[agent]`, no XProf). In it: `pip check` is clean (the agent
moved none of TF's pins), a real Keras job with the agent embedded is captured and analysed
(through PROFILER_ANALYSIS_PYTHON, this test environment's Python, which has XProf), the same job
is captured by a sidecar running here, and nothing prints protobuf errors.

Every CI run covers the oldest and the newest (2.15 with Keras 2, 2.21 with Keras 3); all four:
`PROFILER_COMPAT_TF=2.15,2.17,2.19,2.21 scripts/test tests/compat`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import QUIET_TF, free_port, stop_process, wait_for_status

from profiler_service.demo import run as demo_run

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = os.environ.get("PROFILER_COMPAT_TF", "2.15,2.21").split(",")
# What a job's output shows when a newer protobuf runtime meets code generated for an older one.
PROTOBUF_TROUBLE = re.compile(r"GetPrototype|MessageFactory|protobuf|Descriptors cannot", re.I)


@pytest.fixture(scope="module", params=VERSIONS)
def tf_env(request) -> tuple[str, Path]:
    version = request.param.strip()
    subprocess.run([str(ROOT / "scripts" / "compat-venv"), version], check=True, timeout=1500)
    return version, ROOT / ".compat" / f"tf-{version}" / "bin" / "python"


def start_job(python: Path, *args: str, env: dict[str, str] | None = None):
    proc = subprocess.Popen(
        [str(python), "-m", "profiler_service.demo.job", "--workload", "input-bound", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # TF's and protobuf's complaints land in the same stream
        text=True,
        env={**os.environ, **QUIET_TF, **(env or {})},
    )
    try:
        return proc, demo_run.wait_ready(proc, 240)
    except RuntimeError:
        proc.kill()
        proc.wait()
        raise


def output_after(proc: subprocess.Popen) -> str:
    stop_process(proc)
    return proc.stdout.read()


@pytest.mark.timeout(1800)
def test_the_agents_install_keeps_the_jobs_pins(tf_env):
    version, python = tf_env
    check = subprocess.run(
        [str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0, check.stdout + check.stderr
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    # TF 2.21's wheel names itself tensorflow_cpu, older ones tensorflow-cpu.
    names = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed)}
    assert names["tensorflow-cpu"].startswith(version)
    assert "xprof" not in names, "the agent's install must leave XProf out"


@pytest.mark.timeout(600)
def test_the_agent_in_the_job_captures_and_a_separate_python_analyses(tf_env, tmp_path):
    _, python = tf_env
    store = tmp_path / "store"
    proc, ready = start_job(
        python, "--agent", "--store", str(store), "--seconds", "300",
        env={"PROFILER_ANALYSIS_PYTHON": sys.executable},
    )  # fmt: skip
    try:
        with httpx.Client(base_url=ready["agent_url"], timeout=120) as client:
            accepted = client.post("/profile", params={"duration": "2s"}).json()
            body = wait_for_status(client, accepted["id"], {"ready", "failed"}, timeout_s=240)
    finally:
        out = output_after(proc)
    assert body["status"] == "ready", body.get("error")
    # The step callback marked fit()'s batches (Keras 2 on 2.15, Keras 3 later).
    assert body["summary"]["step_time"]["count"] >= 5
    assert body["findings"][0]["rule"] == "input_bound", body["findings"]
    assert body["summary"]["input_pipeline"]["classification"] == "highly"
    assert not PROTOBUF_TROUBLE.search(out), out[-3000:]


@pytest.mark.timeout(600)
def test_the_sidecar_captures_the_job(tf_env, service_factory):
    _, python = tf_env
    port = free_port()
    proc, _ = start_job(python, "--profiler-port", str(port), "--seconds", "300")
    try:
        service = service_factory([f"grpc://127.0.0.1:{port}"])
        with service.client() as client:
            body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    finally:
        out = output_after(proc)
    assert body["status"] == "ready", body.get("error")
    assert body["summary"]["step_time"]["count"] >= 5
    assert body["findings"][0]["rule"] == "input_bound", body["findings"]
    assert not PROTOBUF_TROUBLE.search(out), out[-3000:]


@pytest.mark.timeout(600)
def test_without_xprof_the_agent_keeps_the_capture_and_says_how_to_analyse_it(tf_env, tmp_path):
    _, python = tf_env
    store = tmp_path / "store"
    proc, ready = start_job(python, "--agent", "--store", str(store), "--seconds", "300")
    try:
        with httpx.Client(base_url=ready["agent_url"], timeout=120) as client:
            accepted = client.post("/profile", params={"duration": "1s"}).json()
            body = wait_for_status(client, accepted["id"], {"ready", "failed"}, timeout_s=240)
            files = client.get(f"/profiles/{body['id']}").json()["files"]
    finally:
        output_after(proc)
    assert body["status"] == "failed"
    assert body["error"]["code"] == "analysis_unavailable"
    assert "PROFILER_ANALYSIS_PYTHON" in body["error"]["detail"]
    assert files and files[0]["name"].endswith(".xplane.pb") and files[0]["size_bytes"] > 0
