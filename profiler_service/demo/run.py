"""`profiler-service demo`: a real Keras job with the agent embedded, profiled through its API,
and what to open next (the report page, XProf, the quickstart for one's own job)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from profiler_service.capture.cost import BEFORE_MIN_S
from profiler_service.exporters.text_report import format_snapshot
from profiler_service.models import Snapshot, SnapshotStatus

_START_TIMEOUT_S = 180
# Trained this long before the capture, so its cost has steps before it to compare with (the
# job's first steps trace and compile; right after them, "before" was one 1,000 ms step).
WARM_UP_S = BEFORE_MIN_S
QUICKSTART = 'README.md, "Quickstart: beside your job" (a sidecar, or this agent)'


def run_demo(store: Path, duration: str = "3s", warm_up_s: float = WARM_UP_S) -> int:
    store = store.expanduser().resolve()
    print(
        "training a small Keras job whose input pipeline decodes in Python, with the profiler "
        f"agent embedded\n(profiler_service/demo/job.py); snapshots go to {store}",
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
        url = wait_ready(job)["agent_url"]
        print(
            f"agent at {url}; after {warm_up_s:g} s of training: "
            f"POST /profile?duration={duration}&wait=true",
            flush=True,
        )
        time.sleep(warm_up_s)
        response = httpx.post(
            f"{url}/profile", params={"duration": duration, "wait": "true"}, timeout=600
        )
        body = response.json()
        if response.status_code >= 400 and "snapshot" in body:
            _report(body["snapshot"], store)  # the capture failed: the snapshot says why
            return 1
        if response.status_code >= 400:
            print(f"capture refused: {body.get('error')}: {body.get('detail')}")
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
    if snapshot.status is not SnapshotStatus.READY:
        return
    print(f"  stored in {store / 'plugins' / 'profile' / snapshot.id}")
    print("\n".join(["", "next:", *next_steps(snapshot.id, store)]))


def next_steps(snapshot_id: str, store: Path) -> list[str]:
    """What to open, with the commands this environment has (the job and its agent have
    ended, so the report page is served again from the store)."""
    serve = command("profiler-service") or f"{sys.executable} -m profiler_service.cli"
    lines = [
        f"  the report page   {serve} serve --store {store}",
        f"                    then open http://127.0.0.1:8080/profiles/{snapshot_id}/report",
    ]
    xprof = command("xprof")
    if xprof is not None:
        lines += [
            f"  XProf             {xprof} --logdir {store} --port 8791",
            f"                    then open http://127.0.0.1:8791/?run={snapshot_id}"
            "&tool=overview_page",
        ]
    return [*lines, f"  your own job      {QUICKSTART}"]


def command(name: str) -> str | None:
    """How to run `name` from here: the bare name where it is on PATH, else its path beside
    this Python (a virtual environment not activated), relative where it is under the current
    directory; None where neither has it."""
    beside = Path(sys.executable).parent / name
    if shutil.which(name) == str(beside) or (not beside.exists() and shutil.which(name)):
        return name
    if not beside.exists():
        return None
    try:
        return str(beside.relative_to(Path.cwd()))
    except ValueError:
        return str(beside)
