"""`profiler-service demo`: a real Keras job with the agent embedded, profiled through its API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from profiler_service.analysis.text_report import format_snapshot
from profiler_service.models import Snapshot, SnapshotStatus

_START_TIMEOUT_S = 180


def run_demo(store: Path, duration: str = "3s") -> int:
    store = store.expanduser().resolve()
    print(
        f"starting a small Keras training job (input pipeline decodes in Python) "
        f"with the profiler agent; snapshots go to {store}",
        flush=True,
    )
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "profiler_service.demo.job",
            "--workload",
            "input-bound",
            "--agent",
            "--store",
            str(store),
            "--seconds",
            "300",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    try:
        ready = wait_ready(job)
        url = ready["agent_url"]
        print(
            f"training; agent at {url}\nPOST {url}/profile?duration={duration}&wait=true",
            flush=True,
        )
        response = httpx.post(
            f"{url}/profile", params={"duration": duration, "wait": "true"}, timeout=600
        )
        body = response.json()
        if response.status_code >= 400:
            print(f"capture refused: {response.status_code} {body}")
            return 1
        _report(body, store)
        return 0 if body["status"] == "ready" else 1
    finally:
        job.terminate()
        try:
            job.wait(20)
        except subprocess.TimeoutExpired:
            job.kill()


def wait_ready(job: subprocess.Popen, timeout_s: float = _START_TIMEOUT_S) -> dict:
    """The demo job's `READY {json}` line, once it is training (the tests start jobs so too)."""
    deadline = time.monotonic() + timeout_s
    assert job.stdout is not None
    while time.monotonic() < deadline:
        line = job.stdout.readline()
        if not line:
            raise RuntimeError(f"the demo job exited early (status {job.wait()})")
        if line.startswith("READY "):
            return json.loads(line[len("READY ") :])
    raise RuntimeError(f"the demo job did not start training within {timeout_s:g} s")


def _report(body: dict, store: Path) -> None:
    snapshot = Snapshot.model_validate(body)
    print()
    print(format_snapshot(snapshot))
    if snapshot.status is SnapshotStatus.READY:
        print(f"  stored in {store / 'plugins' / 'profile' / snapshot.id}")
        print(
            f"\nopen it in XProf:        xprof --logdir {store} --port 8791"
            f"\n  then browse http://127.0.0.1:8791/?run={snapshot.id}&tool=overview_page"
            f"\nor in TensorBoard:       tensorboard --logdir {store}"
        )
