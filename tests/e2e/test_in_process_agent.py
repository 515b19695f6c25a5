"""The agent embedded in a training process captures that process while Keras `fit` runs."""

from __future__ import annotations

import httpx
from helpers import start_job, wait_for_status

from profiler_service import agent


def test_agent_captures_its_own_keras_fit(tmp_path):
    store = tmp_path / "store"
    job = start_job("--workload", "input-bound", "--agent", "--store", str(store))
    try:
        url = job.ready["agent_url"]
        with httpx.Client(base_url=url, timeout=120) as client:
            accepted = client.post("/profile", params={"duration": "2s"})
            assert accepted.status_code == 202
            busy = client.post("/profile", params={"duration": "2s"})
            assert busy.status_code == 409 and busy.json()["error"] == "capture_in_progress"
            body = wait_for_status(client, accepted.json()["id"], {"ready", "failed"})
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    assert body["target"] == "local" and body["workers"] == []
    # TF 2.21 ignores tracer levels in-process; the snapshot says so instead of pretending.
    assert body["capture"]["options_applied"] is False
    assert body["summary"]["step_time"]["count"] >= 5  # the step callback marked fit()'s batches
    assert body["findings"][0]["rule"] == "input_bound"
    assert (
        store / "plugins" / "profile" / body["id"] / body["files"][0]["name"]
    ).stat().st_size > 0


def test_agent_stays_off_unless_its_environment_gate_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("PROFILER_ENABLE", raising=False)
    assert agent.start(port=0, store=tmp_path / "off", env_gate="PROFILER_ENABLE") is None
    assert not (tmp_path / "off").exists()

    monkeypatch.setenv("PROFILER_ENABLE", "1")
    embedded = agent.start(port=0, store=tmp_path / "on", env_gate="PROFILER_ENABLE")
    assert embedded is not None
    try:
        assert httpx.get(f"{embedded.url}/healthz").json()["status"] == "ok"
        ready = httpx.get(f"{embedded.url}/readyz").json()
        assert ready == {"status": "ready", "checks": {"store": "ok", "target:local": "ok"}}
    finally:
        embedded.stop()
    assert not embedded.thread.is_alive()
