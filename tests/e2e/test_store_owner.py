"""A store has one owner: the CLI and a second `serve` beside a live sidecar leave its capture in
flight alone (they ran the crash recovery meant for a stopped service, and marked it
`interrupted`), and say who owns the store."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import QUIET_TF, free_port, wait_for_status


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "profiler_service.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **QUIET_TF},
    )


def test_cli_and_a_second_serve_leave_a_capture_in_flight_alone(input_bound_job, service_factory):
    service = service_factory([input_bound_job.address])
    store = str(service.store)
    with service.client() as client:
        snapshot = client.post("/profile", params={"duration": "12s"}).json()
        snapshot_id = snapshot["id"]
        assert snapshot["status"] == "capturing"
        # Every other opener at once, while the capture runs.
        started = {
            "compare": _cli("compare", snapshot_id, snapshot_id, "--store", store),
            "analyze": _cli("analyze", store),
            "capture": _cli(
                *("capture", "--target", input_bound_job.address, "--store", store),
                *("--duration", "1s"),
            ),
            "serve": _cli("serve", "--store", store, "--port", str(free_port())),
        }
        try:
            done = {n: (*p.communicate(timeout=120), p.returncode) for n, p in started.items()}
        finally:  # one that hung (a second serve that did serve) ends with the test
            for proc in started.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        during = client.get(f"/profiles/{snapshot_id}").json()["status"]
        assert during in ("capturing", "analyzing"), "the openers ran after the capture: longer"

        _, err, code = done["compare"]
        assert code == 2, err
        assert "snapshot_in_progress" in err and "in flight" in err and service.url in err
        for name in ("capture", "serve"):
            _, err, code = done[name]
            assert code == 2, (name, err)
            assert "store_owned" in err, (name, err)
            assert f"pid {service.proc.pid}" in err and service.url in err, (name, err)
        _, err, code = done["analyze"]  # reads copies of finished runs: none is finished yet
        assert code == 2 and "no .xplane.pb" in err, err

        body = wait_for_status(client, snapshot_id, {"ready", "failed", "interrupted"}, 180)
        assert body["status"] == "ready", body.get("error")
        metrics = client.get("/metrics").text
        assert 'profiler_store_snapshots{status="interrupted"} 0.0' in metrics
        assert 'profiler_store_snapshots{status="ready"} 1.0' in metrics
    assert not list((service.store / "failed").iterdir())

    # Finished, it reads from the files while the service still owns the store.
    compared = subprocess.run(
        [sys.executable, "-m", "profiler_service.cli", "compare", snapshot_id, snapshot_id,
         "--store", store],
        capture_output=True, text=True, timeout=120, env={**os.environ, **QUIET_TF},
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    assert f"{snapshot_id} -> {snapshot_id}" in compared.stdout
