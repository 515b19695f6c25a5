"""`xprof --logdir STORE` lists every ready snapshot as a run, and nothing unfinished."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import httpx
from helpers import QUIET_TF, free_port


def test_xprof_server_lists_only_ready_snapshots(input_bound_job, service_factory, tmp_path):
    store = tmp_path / "store"
    service = service_factory([input_bound_job.address], store=store)
    with service.client() as client:
        ready = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
    assert ready["status"] == "ready", ready.get("error")
    service.stop()
    xplane = next((store / "plugins" / "profile" / ready["id"]).glob("*.xplane.pb"))
    # What an in-flight and a failed snapshot hold on disk, with real capture bytes in each.
    for place in (
        store / ".staging" / "20260101-000000-default-aaaaaa" / "run",
        store / "failed" / "20260101-000000-default-bbbbbb" / "run",
    ):
        place.mkdir(parents=True)
        shutil.copy(xplane, place / xplane.name)

    port = free_port()
    xprof = subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "xprof"),
            "--logdir",
            str(store),
            "--port",
            str(port),
            "--grpc_port",
            str(free_port()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **QUIET_TF},
    )
    try:
        runs = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and runs is None:
            try:
                runs = httpx.get(
                    f"http://127.0.0.1:{port}/data/plugin/profile/runs", timeout=5
                ).json()
            except httpx.TransportError:
                time.sleep(0.5)
        assert runs == [ready["id"]]
        tools = httpx.get(
            f"http://127.0.0.1:{port}/data/plugin/profile/run_tools",
            params={"run": ready["id"]},
            timeout=60,
        ).json()
        assert "overview_page" in tools
    finally:
        xprof.terminate()
        xprof.wait(20)
