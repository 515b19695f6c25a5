"""What a sidecar exports after capturing a real CPU-only job: its step time, no device idle
share (XProf writes 0 % where there is no device: a series would say the device never idled),
and no `_created` series beside the counters."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def test_a_cpu_job_s_snapshot_exports_no_device_idle_share(input_bound_job, service_factory):
    service = service_factory([input_bound_job.address])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "1s", "wait": "true"}).json()
        assert body["status"] == "ready", body.get("error")
        assert body["summary"]["utilisation"]["hardware_type"] == "CPU_ONLY"
        assert body["summary"]["utilisation"]["device_idle_share"] == 0.0  # XProf's, on no device
        text = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    step = families["profiler_latest_step_time_seconds"].samples
    assert [s.labels for s in step] == [{"target": "default"}] and step[0].value > 0
    assert families["profiler_latest_device_idle_ratio"].samples == []
    assert "_created" not in text
    captures = families["profiler_captures"].samples
    ready = [s for s in captures if s.labels.get("outcome") == "ready" and s.value == 1]
    assert len(ready) == 1, captures
