"""The sidecar captures a real TensorFlow job through its profiler server, over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import wait_for_status
from xprof.convert import _pywrap_profiler_plugin, raw_to_tool_data


def test_capture_of_input_bound_job_is_stored_where_xprof_reads_it(
    input_bound_job, service_factory
):
    service = service_factory([input_bound_job.address])
    with service.client() as client:
        accepted = client.post("/profile", params={"duration": "2s"})
        assert accepted.status_code == 202
        snapshot = accepted.json()
        assert snapshot["status"] == "capturing"
        assert snapshot["links"]["self"] == f"/profiles/{snapshot['id']}"

        seen = {snapshot["status"]}
        body = snapshot
        while body["status"] not in ("ready", "failed"):
            body = client.get(f"/profiles/{snapshot['id']}").json()
            seen.add(body["status"])
        assert body["status"] == "ready", body.get("error")
        assert "analyzing" in seen or body["capture_finished_at"] is not None

        run_dir = service.store / "plugins" / "profile" / snapshot["id"]
        xplanes = sorted(run_dir.glob("*.xplane.pb"))
        assert [p.name for p in xplanes] == [f["name"] for f in body["files"]]
        assert xplanes[0].stat().st_size > 10_000
        assert json.loads((run_dir / "snapshot.json").read_text())["status"] == "ready"

        # The raw file downloads byte for byte.
        download = client.get(body["links"]["files"][xplanes[0].name])
        assert download.status_code == 200
        assert download.content == xplanes[0].read_bytes()

    # XProf itself reads the stored capture: tools listed, overview page parses.
    tools = raw_to_tool_data.xspace_to_tool_names([str(p) for p in xplanes])
    assert "overview_page" in tools and "trace_viewer@" in tools
    raw, ok = _pywrap_profiler_plugin.xspace_to_tools_data(
        [str(p) for p in xplanes], "overview_page", {"use_saved_result": False}
    )
    assert ok
    assert any("steptime_ms_average" in t.get("p", {}) for t in json.loads(raw))

    # The summary reads XProf's verdict: this job waits on Python decoding.
    summary = body["summary"]
    assert summary["step_time"]["count"] >= 5
    assert summary["step_time"]["avg_ms"] > 0
    # The demo's markers carry its batch (ProfilerStepCallback(examples=32)): read back.
    assert summary["step_time"]["examples_per_step"] == 32
    assert "HIGHLY input-bound" in summary["input_pipeline"]["conclusion"]
    assert summary["input_pipeline"]["input_share"] > 0.5
    assert summary["tools"] == tools
    first = body["findings"][0]
    assert (first["rule"], first["severity"]) == ("input_bound", "critical")
    assert first["evidence"]["python_in_pipeline"] is True
    assert first["evidence"]["slowest_stage"] == "preprocessing"
    assert "num_parallel_calls=tf.data.AUTOTUNE" in first["recommendation"]


def test_tracer_levels_reach_the_snapshot(input_bound_job, service_factory):
    service = service_factory([input_bound_job.address])
    with service.client() as client:
        body = client.post(
            "/profile",
            params={
                "duration": "500ms",
                "wait": "true",
                "host_tracer_level": 3,
                "python_tracer_level": 1,
            },
        ).json()
    assert body["status"] == "ready", body.get("error")
    assert body["capture"]["host_tracer_level"] == 3
    assert body["capture"]["python_tracer_level"] == 1
    assert body["capture"]["options_applied"] is True
    assert body["capture"]["duration_ms"] == 500


def test_snapshot_ids_are_run_names_in_the_store_layout(input_bound_job, service_factory):
    service = service_factory([f"trainer={input_bound_job.address}"])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    assert body["target"] == "trainer" and "-trainer-" in body["id"]
    runs = [p.parent.name for p in Path(service.store).glob("**/plugins/profile/*/snapshot.json")]
    assert runs == [body["id"]]
    assert not list((service.store / ".staging").iterdir())


def test_unreachable_target_fails_with_its_address_and_service_keeps_serving(service_factory):
    from helpers import free_port

    dead = f"127.0.0.1:{free_port()}"
    service = service_factory([f"grpc://{dead}"])
    with service.client() as client:
        first = client.post("/profile", params={"duration": "500ms"}).json()
        body = wait_for_status(client, first["id"], {"ready", "failed"})
        assert body["status"] == "failed"
        assert body["error"]["code"] == "target_unreachable"
        assert dead in body["error"]["detail"]
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503 and dead in ready.json()["checks"]["target:default"]
        # Nothing of the failed capture is visible as a run; the next capture is accepted.
        assert not list((service.store / "plugins" / "profile").iterdir())
        assert client.post("/profile", params={"duration": "500ms"}).status_code == 202
