"""`profiler-service demo` as a newcomer runs it (scripts/demo): a real Keras job with the agent
embedded, captured through its API, and output that fits one screen and says what to open next,
with commands this environment has."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import QUIET_TF

from profiler_service.capture.cost import MIN_SAMPLES_BEFORE

ROOT = Path(__file__).resolve().parents[2]
SCREEN_LINES = 40


def test_the_demo_records_memory_says_what_the_capture_cost_and_what_to_open_next(tmp_path):
    store = tmp_path / "profiles"
    # oneDNN off and no allocator choice: a CPU that records no memory events by itself, so the
    # events are there only if the demo's agent started before TensorFlow and turned them on.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    result = subprocess.run(
        [sys.executable, "-m", "profiler_service.cli", "demo", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**env, **QUIET_TF, "TF_ENABLE_ONEDNN_OPTS": "0"},
    )
    out = result.stdout
    assert result.returncode == 0, out[-2000:] + result.stderr[-2000:]
    assert ": ready" in out and "HIGHLY input-bound" in out
    [path] = (store / "plugins" / "profile").glob("*/snapshot.json")
    snapshot = json.loads(path.read_text())

    # The agent started before TensorFlow: the capture holds memory events, no warning.
    assert snapshot["summary"]["memory_unrecorded"] is None and snapshot["summary"]["memory"]
    assert "memory: no allocator events" not in out

    # The capture waited for steps to compare with: its cost is a comparison, stated as one.
    cost = snapshot["capture"]["cost"]
    assert cost["ratio"] is not None and cost["steps_before"] >= MIN_SAMPLES_BEFORE, cost
    assert re.search(r"the capture cost the job .*ms a step while traced, .* ms before", out)

    # What to open next, with commands that are there.
    assert f"http://127.0.0.1:8080/profiles/{snapshot['id']}/report" in out
    serve = re.search(r"the report page +(\S+) serve --store (\S+)", out)
    assert serve and Path(serve.group(2)) == store
    xprof = re.search(r"XProf +(\S+) --logdir (\S+) --port 8791", out)
    assert xprof and Path(xprof.group(2)) == store
    for program in (serve.group(1), xprof.group(1)):
        assert shutil.which(program) or (tmp_path / program).exists(), program
    assert "tensorboard" not in out or shutil.which("tensorboard")
    quickstart = re.search(r'README\.md, "([^"]+)"', out)
    assert quickstart and f"\n## {quickstart.group(1)}\n" in (ROOT / "README.md").read_text()

    assert len(out.splitlines()) <= SCREEN_LINES, out
