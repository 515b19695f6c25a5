"""SIGTERM (a pod being stopped) lets the capture in flight finish instead of losing it."""

from __future__ import annotations

import signal

from helpers import wait_for_status


def test_sigterm_mid_capture_finishes_the_snapshot(input_bound_job, service_factory, tmp_path):
    store = tmp_path / "store"
    service = service_factory([input_bound_job.address], store=store)
    with service.client() as client:
        snapshot = client.post("/profile", params={"duration": "3s"}).json()
        wait_for_status(client, snapshot["id"], {"capturing"})
    service.proc.send_signal(signal.SIGTERM)
    assert service.proc.wait(90) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    assert "stopping with captures in flight" not in service.log.read_text()

    restarted = service_factory([input_bound_job.address], store=store)
    with restarted.client() as client:
        body = client.get(f"/profiles/{snapshot['id']}").json()
    assert body["status"] == "ready", body.get("error")
    assert (store / "plugins" / "profile" / snapshot["id"] / "snapshot.json").is_file()


def test_a_capture_longer_than_the_grace_is_interrupted_not_half_kept(
    input_bound_job, service_factory, tmp_path
):
    store = tmp_path / "store"
    service = service_factory(
        [input_bound_job.address], {"PROFILER_SHUTDOWN_GRACE_S": "1"}, store=store
    )
    with service.client() as client:
        snapshot = client.post("/profile", params={"duration": "20s"}).json()
        wait_for_status(client, snapshot["id"], {"capturing"})
    service.proc.send_signal(signal.SIGTERM)
    assert service.proc.wait(90) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    assert snapshot["id"] in service.log.read_text()  # named in the warning

    restarted = service_factory([input_bound_job.address], store=store)
    with restarted.client() as client:
        assert client.get(f"/profiles/{snapshot['id']}").json()["status"] == "interrupted"
