"""The command line: one-off capture and the bind safety check (the demo: test_demo.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import free_port, run_cli


def test_capture_command_stores_an_analysed_snapshot(input_bound_job, tmp_path):
    result = run_cli(
        "capture", "--target", input_bound_job.address, "--store", str(tmp_path), "--duration", "1s"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert ": ready" in result.stdout
    assert "HIGHLY input-bound" in result.stdout
    assert len(list((tmp_path / "plugins" / "profile").glob("*/*.xplane.pb"))) == 1


def test_capture_command_exits_nonzero_with_the_reason(tmp_path):
    dead = f"127.0.0.1:{free_port()}"
    result = run_cli(
        "capture", "--target", f"grpc://{dead}", "--store", str(tmp_path), "--duration", "500ms"
    )
    assert result.returncode == 1
    assert "target_unreachable" in result.stdout and dead in result.stdout


def test_serve_refuses_a_public_bind_without_a_token(tmp_path):
    env_free = {k: v for k, v in os.environ.items() if k != "PROFILER_API_TOKEN"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "profiler_service.cli",
            "serve",
            "--host",
            "0.0.0.0",
            "--store",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env_free,
    )
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0 without PROFILER_API_TOKEN" in result.stderr
