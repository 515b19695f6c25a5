"""Store and latest-analysis gauges: read from the SQLite index, never from snapshot.json."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from profiler_service.exporters.service_collector import ServiceCollector, read_analysis

SUMMARY = {
    "bottleneck": "input",
    "step_time": {"count": 36, "avg_ms": 77.0},
    "input_pipeline": {"input_share_pct": 97.4},
    "utilisation": {"device_idle_pct": 12.5},
}
FINDINGS = [
    {"rule": "input_bound", "severity": "critical", "title": "t"},
    {"rule": "python_in_input", "severity": "warning", "title": "t"},
    {"rule": "python_in_input", "severity": "warning", "title": "t2"},
]


def scrape(service) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(ServiceCollector(service.controller, service.store))
    text = generate_latest(registry).decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_store_totals_by_status_and_capture_in_progress(service, add):
    add("s1", xplane_bytes=1000)
    add("s2", minutes=1, xplane_bytes=3000)
    add("f1", minutes=2, ready=False)
    service.store.set_pinned("s1", True)
    m = scrape(service)
    snapshots = {lab["status"]: v for lab, v in m["profiler_store_snapshots"]}
    assert snapshots == {"ready": 2, "failed": 1, "interrupted": 0, "capturing": 0, "analyzing": 0}
    size = {lab["status"]: v for lab, v in m["profiler_store_size_bytes"]}
    # Each ready snapshot holds its xplane file and its snapshot.json.
    assert 4000 < size["ready"] < 4000 + 2 * 8000
    assert m["profiler_store_pinned_snapshots"] == [({}, 1.0)]
    assert m["profiler_capture_in_progress"] == [({"target": "default"}, 0.0)]


def test_latest_analysis_per_target_comes_from_the_newest_ready_snapshot(service, add):
    add("old", summary={"bottleneck": "device", "step_time": {"avg_ms": 10.0}})
    add("new", minutes=5, summary=SUMMARY, findings=FINDINGS)
    add("newer-failed", minutes=9, ready=False)
    m = scrape(service)
    info = m["profiler_latest_analysis_info"]
    assert info == [({"target": "default", "snapshot_id": "new", "bottleneck": "input"}, 1.0)]
    assert m["profiler_latest_step_time_seconds"] == [({"target": "default"}, 0.077)]
    assert m["profiler_latest_input_bound_ratio"][0][1] == pytest.approx(0.974)
    assert m["profiler_latest_device_idle_ratio"][0][1] == pytest.approx(0.125)
    findings = {(lab["rule"], lab["severity"]): v for lab, v in m["profiler_latest_findings"]}
    assert findings == {("input_bound", "critical"): 1, ("python_in_input", "warning"): 2}
    created = m["profiler_latest_analysis_timestamp_seconds"][0][1]
    assert created == service.store.get("new").created_at.timestamp()


def test_a_cpu_only_capture_exports_no_device_idle_share(service, add):
    # XProf writes device_idle_time_percent 0 where there is no device at all.
    utilisation = {"hardware_type": "CPU_ONLY", "device_type": "CPU", "device_idle_pct": 0.0}
    add("cpu", summary={**SUMMARY, "utilisation": utilisation})
    m = scrape(service)
    assert "profiler_latest_device_idle_ratio" not in m, m.get("profiler_latest_device_idle_ratio")
    assert m["profiler_latest_step_time_seconds"] == [({"target": "default"}, 0.077)]


def test_each_worker_of_a_multi_worker_snapshot_gets_its_busy_time(service, add):
    per_host = [
        {"host": "10.0.0.1_2222", "busy_ms_avg": 1.2},
        {"host": "10.0.0.2_2222", "busy_ms_avg": 6.1},
        {"host": "10.0.0.3_2222", "busy_ms_avg": None},  # no steps found: not exported
    ]
    add("multi", summary={**SUMMARY, "per_host": per_host})
    busy = {lab["host"]: v for lab, v in scrape(service)["profiler_latest_host_busy_seconds"]}
    assert busy == {"10.0.0.1_2222": pytest.approx(0.0012), "10.0.0.2_2222": pytest.approx(0.0061)}


def test_scrapes_never_read_snapshot_json_files(service, add):
    add("a", summary=SUMMARY, findings=FINDINGS)
    before = scrape(service)
    for doc in service.store.root.rglob("snapshot.json"):
        doc.unlink()
    assert scrape(service) == before


def test_a_new_snapshot_replaces_the_cached_latest_and_a_deleted_one_drops_out(service, add):
    collector = ServiceCollector(service.controller, service.store)
    add("first", summary=SUMMARY)
    list(collector.collect())
    add("second", minutes=1, summary={"bottleneck": "device", "step_time": {"avg_ms": 5.0}})
    latest = collector._latest_for_targets()
    assert latest["default"].snapshot_id == "second" and latest["default"].step_time_s == 0.005
    service.store.delete("second")
    service.store.delete("first")
    assert collector._latest_for_targets() == {}


def test_read_analysis_accepts_the_first_summary_shape_and_missing_numbers():
    first_shape = json.dumps(
        {"summary": {"step_time_ms_avg": 50.0, "bottleneck": "host"}, "findings": []}
    )
    a = read_analysis("x", "2026-01-05T12:00:00+00:00", first_shape)
    assert (a.step_time_s, a.bottleneck, a.input_share, a.device_idle_share) == (
        0.05,
        "host",
        None,
        None,
    )
    empty = read_analysis("y", "2026-01-05T12:00:00+00:00", json.dumps({"summary": None}))
    assert (empty.step_time_s, empty.bottleneck, empty.findings) == (None, "unknown", {})


@pytest.mark.parametrize("suffix, scale", [("_share", 1.0), ("_pct", 100.0)])  # _pct: 0.1.0
def test_read_analysis_takes_a_gpus_idle_share_from_its_plane_where_xprof_gives_none(suffix, scale):
    """XProf leaves the device idle share null on GPUs; the GPUs that ran kernels give it. A
    snapshot written before 0.2.0 holds percentages (`_pct`): read as the same shares."""

    def device(n: int, busy: float, kernels: int) -> dict:
        return {
            "device": f"/device:GPU:{n}",
            f"busy{suffix}": busy * scale,
            f"idle{suffix}": (1 - busy) * scale,
            "kernels": {"count": kernels},
        }

    gpu = {"devices": [device(0, 0.2, 9), device(1, 0.4, 9), device(2, 0.0, 0)]}
    utilisation = {f"device_idle{suffix}": None}
    doc = {"summary": {"utilisation": utilisation, "gpu": gpu}, "findings": []}
    a = read_analysis("x", "2026-01-05T12:00:00+00:00", json.dumps(doc))
    assert a.device_idle_share == pytest.approx(0.7)  # GPU:2 ran nothing: not averaged in
    assert a.gpu_busy == pytest.approx(
        {"/device:GPU:0": 0.2, "/device:GPU:1": 0.4, "/device:GPU:2": 0.0}
    )
    utilisation[f"device_idle{suffix}"] = 0.12 * scale  # XProf's, where it has one
    doc["summary"]["input_pipeline"] = {
        f"input_share{'' if suffix == '_share' else '_pct'}": 0.5 * scale
    }
    a = read_analysis("x", "2026-01-05T12:00:00+00:00", json.dumps(doc))
    assert (a.device_idle_share, a.input_share) == (pytest.approx(0.12), pytest.approx(0.5))
