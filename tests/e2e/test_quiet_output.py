"""Output that fits a log: off a terminal the capture command prints no progress bar (a line
saying what it captures, then the result), the hub's migrations and the ledger print no
Alembic lines, and the servers' access logs keep scrapes and probes out of INFO. Each runs the
real command as a child process with pipes, as a CI job or a container's log would."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading

import httpx
from helpers import QUIET_TF, run_cli, start_hub


def lines(text: str) -> list[str]:
    """What a log shows: each `\\r` redraw of a bar is a line of its own there."""
    return [x for x in text.replace("\r", "\n").splitlines() if x.strip()]


def test_off_a_terminal_the_capture_command_prints_no_progress_bar(input_bound_job, tmp_path):
    result = run_cli(
        "capture", "--target", input_bound_job.address, "--store", str(tmp_path), "--duration", "2s"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    err = lines(result.stderr)
    assert not any("%|" in x for x in err), err  # no bar: not one redraw
    assert err[0].startswith("capturing default for 2 s: snapshot "), err
    # The start line and at most the pipeline's own INFO line that the snapshot is ready.
    assert len(err) <= 2, err
    assert result.stdout.startswith("snapshot ") and ": ready" in result.stdout


def test_on_a_terminal_the_capture_command_draws_its_bar(input_bound_job, tmp_path):
    leader, follower = pty.openpty()
    # A terminal of 24 rows and 100 columns (a new pty has none: tqdm would draw 0 wide).
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler_service.cli", "capture", "--target",
         input_bound_job.address, "--store", str(tmp_path), "--duration", "1s"],
        stdout=subprocess.PIPE, stderr=follower, text=True, env={**os.environ, **QUIET_TF},
    )  # fmt: skip
    os.close(follower)
    seen: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                return
            if not chunk:
                return
            seen.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out, _ = proc.communicate(timeout=300)
    reader.join(10)
    os.close(leader)
    terminal = b"".join(seen).decode(errors="replace")
    assert proc.returncode == 0, terminal[-2000:]
    assert "capturing:" in terminal and "%|" in terminal, terminal[-2000:]
    assert not terminal.lstrip().startswith("capturing default for")  # the bar, not the line
    assert ": ready" in out


def test_access_logs_keep_scrapes_and_probes_out_of_info(service_factory):
    service = service_factory(["grpc://127.0.0.1:9"])
    with service.client() as client:
        for _ in range(5):
            assert client.get("/metrics").status_code == 200
            assert client.get("/healthz").status_code == 200
            client.get("/readyz")  # 503: nothing listens at the target, and that is logged
        assert client.get("/profiles").status_code == 200
        assert client.get("/no-such-route").status_code == 404
    service.stop()
    log = lines(service.log.read_text())
    access = [x for x in log if '"GET /' in x]
    assert not [x for x in access if "GET /metrics" in x or "GET /healthz" in x], access
    assert len([x for x in access if "GET /readyz" in x and " 503" in x]) == 5, access
    assert len([x for x in access if "GET /profiles " in x and " 200" in x]) == 1, access
    assert len([x for x in access if "GET /no-such-route" in x]) == 1, access


def test_the_hub_and_the_ledger_print_no_alembic_lines(tmp_path):
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    hub = start_hub(tmp_path / "hub", {"PROFILER_STORE_URL": f"file://{bucket}"})
    try:
        assert httpx.get(f"{hub.url}/metrics").status_code == 200
        result = run_cli("ledger", "--hub", hub.url, "--window", "24h")
    finally:
        hub.stop()
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = lines(result.stdout)
    assert out[0].startswith("GPU-hours over "), out  # the table first
    hub_log = lines(hub.log.read_text())
    assert not [x for x in hub_log if "alembic" in x], hub_log
    assert not [x for x in hub_log if "GET /metrics" in x or "GET /healthz" in x], hub_log
