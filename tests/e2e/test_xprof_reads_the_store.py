"""`xprof --logdir STORE` lists every ready snapshot as a run, and nothing unfinished."""

from __future__ import annotations

import shutil

from helpers import xprof_server


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

    with xprof_server(store) as xprof:
        assert xprof("runs") == [ready["id"]]
        assert "overview_page" in xprof("run_tools", {"run": ready["id"]})
