"""GET /metrics on the real app: text and OpenMetrics exposition, capture counters, exemplars."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

from fastapi.testclient import TestClient
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from profiler_service.api.app import create_app
from profiler_service.models import SnapshotError, SnapshotStatus, TriggerKind, utcnow
from profiler_service.targets import in_process_target
from profiler_service.verification_record import FixStatus, PredictionCheck, Verification

# What Prometheus 2.42 sends when it scrapes.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def finish(service, add, snapshot_id: str, *, failed: bool = False, kind=TriggerKind.API):
    """Store a finished snapshot and hand it to the controller's on_finished callbacks."""
    snapshot = add(snapshot_id, ready=not failed)
    snapshot = service.store.get(snapshot_id)
    snapshot.trigger.kind = kind
    t = utcnow()
    snapshot.capture_started_at = t
    snapshot.capture_finished_at = None if failed else t + timedelta(seconds=1.5)
    snapshot.finished_at = t + timedelta(seconds=(3 if failed else 9.5))
    if failed:
        snapshot.status = SnapshotStatus.FAILED
        snapshot.error = SnapshotError(code="target_unreachable", detail="nothing listens")
    for callback in service.controller.on_finished:
        callback(snapshot)
    return snapshot


def samples(families) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in families:
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_text_exposition_parses_and_names_every_sidecar_family(service):
    with TestClient(create_app(service)) as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {f.name for f in parse_text(response.text)}
    for name in (
        "profiler_captures",
        "profiler_capture_errors",
        "profiler_capture_duration_seconds",
        "profiler_analysis_duration_seconds",
        "profiler_capture_in_progress",
        "profiler_store_snapshots",
        "profiler_store_size_bytes",
        "profiler_gpu_metrics_available",
        "profiler_host_cpu_utilization_ratio",
        "profiler_host_memory_used_bytes",
        "process_cpu_seconds",
        "process_resident_memory_bytes",
    ):
        assert name in names, name
    # The sidecar captures another process: no step or TensorFlow families of its own.
    assert "profiler_training_steps" not in names
    assert "profiler_tf_device_memory_bytes" not in names


def test_no_created_series_in_either_exposition(service, add):
    """prometheus_client adds a `_created` series to each counter and histogram: one more
    series per label set that nothing reads; neither format carries them."""
    finish(service, add, "20260105-120000-default-abc123")
    for accept in (None, PROMETHEUS_ACCEPT):
        body, _ = service.metrics.render(accept)
        text = body.decode()
        assert "profiler_captures_total{" in text and "profiler_capture_duration_seconds" in text
        assert "_created" not in text, [x for x in text.splitlines() if "_created" in x][:3]


def test_capture_counter_starts_at_zero_for_each_configured_target(service):
    body, _ = service.metrics.render(None)
    s = samples(parse_text(body.decode()))
    ready_api = [
        x.value
        for x in s["profiler_captures_total"]
        if x.labels == {"target": "default", "trigger": "api", "outcome": "ready"}
    ]
    assert ready_api == [0.0]


def test_openmetrics_carries_the_snapshot_id_as_exemplar(service, add):
    snapshot = finish(service, add, "20260105-120000-default-abc123")
    finish(service, add, "20260105-120100-default-def456", failed=True, kind=TriggerKind.WEBHOOK)
    with TestClient(create_app(service)) as client:
        response = client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")
    s = samples(parse_openmetrics(response.text))
    captures = {
        (x.labels["trigger"], x.labels["outcome"]): x
        for x in s["profiler_captures_total"]
        if x.labels["target"] == "default"
    }
    ready = captures[("api", "ready")]
    assert ready.value == 1
    assert ready.exemplar is not None and ready.exemplar.labels == {"snapshot_id": snapshot.id}
    failed = captures[("webhook", "failed")]
    assert failed.value == 1
    assert failed.exemplar.labels == {"snapshot_id": "20260105-120100-default-def456"}
    assert captures[("api", "failed")].value == 0
    errors = [(x.labels, x.value) for x in s["profiler_capture_errors_total"]]
    assert errors == [({"target": "default", "error": "target_unreachable"}, 1.0)]
    # Capture: 1.5 s (ready) and 3 s (failed before the file existed); analysis: 8 s (ready only).
    capture = {x.labels["le"]: x for x in s["profiler_capture_duration_seconds_bucket"]}
    assert (capture["1.0"].value, capture["2.0"].value, capture["5.0"].value) == (0, 1, 2)
    assert capture["2.0"].exemplar.labels == {"snapshot_id": snapshot.id}
    analysis = {x.labels["le"]: x.value for x in s["profiler_analysis_duration_seconds_bucket"]}
    assert (analysis["5.0"], analysis["10.0"], analysis["+Inf"]) == (0, 1, 1)
    assert s["profiler_analysis_duration_seconds_sum"][0].value == 8.0


def test_fix_verdicts_and_checked_predictions_are_counted(service, add):
    snapshot = add("20260105-120000-default-abc123")
    snapshot.verification = [
        Verification(
            rule="input_bound",
            status=FixStatus.PERSISTS,
            predicted_saving_share=0.5,
            predicted_saving_range=(0.25, 0.82),
            measured_saving_share=0.05,
            prediction=PredictionCheck.BELOW,
        ),
        # Not checked (the step's change was not its alone): no saving kept, no prediction.
        Verification(rule="retracing", status=FixStatus.PERSISTS, measured_saving_share=0.05),
    ]
    for callback in service.controller.on_finished:
        callback(snapshot)
    with TestClient(create_app(service)) as client:
        s = samples(
            parse_openmetrics(client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT}).text)
        )
    verdicts = {
        (x.labels["rule"], x.labels["status"]): x.value for x in s["profiler_fix_verified_total"]
    }
    assert verdicts == {("input_bound", "persists"): 1, ("retracing", "persists"): 1}
    [below] = s["profiler_fix_predictions_total"]
    assert below.labels == {"target": "default", "rule": "input_bound", "agreement": "below"}
    assert below.value == 1 and below.exemplar.labels == {"snapshot_id": snapshot.id}
    saving = {(x.labels["rule"], x.labels["kind"]): x.value for x in s["profiler_fix_saving_ratio"]}
    low, high = snapshot.verification[0].predicted_saving_range
    assert saving == {
        ("input_bound", "measured"): 0.05,
        ("input_bound", "predicted"): 0.5,
        ("input_bound", "predicted_low"): low,
        ("input_bound", "predicted_high"): high,
    }


def test_text_format_leaves_exemplars_out(service, add):
    finish(service, add, "20260105-120000-default-abc123")
    body, content_type = service.metrics.render("text/plain")
    assert content_type.startswith("text/plain")
    assert '# {snapshot_id="' not in body.decode()
    ready = [
        x
        for x in samples(parse_text(body.decode()))["profiler_captures_total"]
        if x.labels["outcome"] == "ready" and x.labels["trigger"] == "api"
    ]
    assert ready[0].value == 1


def test_in_process_service_adds_step_and_tf_families(make_service):
    service = make_service({}, targets=[in_process_target("local")])
    names = {f.name for f in parse_text(service.metrics.render(None)[0].decode())}
    assert {"profiler_training_steps", "profiler_training_step_duration_seconds"} <= names


def test_the_sidecar_serves_metrics_without_importing_tensorflow(tmp_path):
    code = f"""
import sys
from fastapi.testclient import TestClient
from profiler_service.api.app import create_app
from profiler_service.config import Settings
from profiler_service.service import build_service
service = build_service(Settings(store={str(tmp_path / "store")!r}, targets="grpc://127.0.0.1:9"))
with TestClient(create_app(service)) as client:
    assert client.get("/metrics").status_code == 200
assert "tensorflow" not in sys.modules, "the sidecar imported TensorFlow"
print("OK")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "OK"
