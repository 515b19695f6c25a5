"""Every metric a deploy file reads exists in the service's real /metrics output.

Names come from the Prometheus rules in deploy/prometheus/, the chart's PrometheusRule (both
choices of GPU metric), the Grafana dashboard (panels, annotations, variables) and Grafana's alert
rule. They are checked against what two real processes export: `profiler-service serve` (the
sidecar; a stand-in `pynvml` with one GPU on its PYTHONPATH, so the per-GPU series appear on a
machine without one) and a Keras job with the in-process agent (training steps), after one capture
so the latest-analysis series exist. A renamed metric fails here instead of silently muting an
alert. Names exported by other software are listed in EXTERNAL.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
import yaml
from deploy_tools import DEPLOY, install_dry_run, metric_names, rule_groups
from helpers import free_port, start_job, wait_for_status
from prometheus_client.parser import text_string_to_metric_families

EXTERNAL = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "NVIDIA dcgm-exporter (profiling metrics)",
    "DCGM_FI_DEV_GPU_UTIL": "NVIDIA dcgm-exporter (device metrics; the fleet ledger's default)",
}
NVML_STANDIN = Path(__file__).parent / "nvml_standin"


def test_metric_names_reads_only_metric_names():
    expr = (
        'sum by (le, pod) (rate(a_bucket{x="y", z=~"b.*"}[5m] offset 10m)) > 1.5 * b:rec'
        " * on (instance, target) group_left (snapshot_id) c_info unless d"
        " + label_replace(e, 'x', '$1', 'y', '(.*)') / increase(f_total[$__rate_interval])"
    )
    assert metric_names(expr) == {"a_bucket", "b:rec", "c_info", "d", "e", "f_total"}


def used_names() -> dict[str, set[str]]:
    """{metric name: the files that read it}; recording rules' own names are left out."""
    used: dict[str, set[str]] = {}
    recorded: set[str] = set()

    def add(expr: str, where: str) -> None:
        for name in metric_names(expr):
            used.setdefault(name, set()).add(where)

    for path in sorted((DEPLOY / "prometheus").glob("*.rules.yml")):
        for group in rule_groups(path):
            for rule in group["rules"]:
                add(rule["expr"], f"{path.name}:{rule.get('alert') or rule.get('record')}")
                recorded.update([rule["record"]] if "record" in rule else [])
    for metric in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "profiler_gpu_utilization_ratio"):
        values = {"prometheusRule": {"enabled": True, "gpuUnderused": {"metric": metric}}}
        for doc in install_dry_run(values):
            if doc["kind"] == "PrometheusRule":
                for group in doc["spec"]["groups"]:
                    for rule in group["rules"]:
                        add(rule["expr"], f"helm PrometheusRule:{rule['alert']}")
    dashboard = json.loads((DEPLOY / "grafana/dashboards/profiler-service.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            add(target["expr"], f"dashboard panel {panel['title']!r}")
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            add(annotation["expr"], f"dashboard annotation {annotation['name']!r}")
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            metric = variable["definition"].split("(", 1)[1].split(",")[0]
            add(metric, f"dashboard variable {variable['name']}")
    grafana_rules = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/alerting/rules.yaml").read_text()
    )
    for group in grafana_rules["groups"]:
        for rule in group["rules"]:
            for query in rule["data"]:
                if "expr" in query["model"]:
                    add(query["model"]["expr"], f"Grafana alert rule {rule['title']}")
    return {name: where for name, where in used.items() if name not in recorded}


def scrape(url: str) -> set[str]:
    """Sample names, and those of families exported with no sample yet (a gauge's one sample
    has its family's name, a counter's is `_total`): profiler_latest_host_busy_seconds needs a
    multi-worker snapshot, profiler_fix_predictions_total a fix verified."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    families = list(text_string_to_metric_families(text))
    sampled = {s.name for family in families for s in family.samples}
    declared = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in families
        if family.type in ("gauge", "counter")
    }
    return sampled | declared


@pytest.fixture
def with_nvml_standin(monkeypatch):
    path = os.pathsep.join(filter(None, [str(NVML_STANDIN), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)


def test_every_metric_the_deploy_files_use_is_exported(
    with_nvml_standin, service_factory, tmp_path
):
    used = used_names()
    assert {"profiler_gpu_utilization_ratio", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"} <= used.keys()

    # The sidecar: service, store, webhook, host and (stand-in) GPU series.
    # Nothing listens at its target, so one capture fails: profiler_capture_errors_total has a
    # series only after the first failure.
    sidecar = service_factory(["trainer=grpc://127.0.0.1:1"])
    with sidecar.client() as client:
        failed = client.post("/profile", params={"duration": "100ms"}).json()
        wait_for_status(client, failed["id"], {"failed"}, timeout_s=120)
    exported = scrape(sidecar.url)
    assert "profiler_gpu_utilization_ratio" in exported, "the stand-in NVML was not used"

    # The in-process agent: training steps, and after one capture the latest analysis.
    job = start_job(
        "--workload", "input-bound", "--agent", "--agent-port", str(free_port()),
        "--store", str(tmp_path / "agent-store"),
    )  # fmt: skip
    try:
        agent = job.ready["agent_url"]
        with httpx.Client(base_url=agent, timeout=180) as client:
            snapshot = client.post("/profile", params={"duration": "1s"}).json()
            wait_for_status(client, snapshot["id"], {"ready"}, timeout_s=180)
        exported |= scrape(agent)
    finally:
        job.stop()

    missing = {
        name: sorted(where)
        for name, where in used.items()
        if name not in exported and name not in EXTERNAL
    }
    assert not missing, (
        "deploy files read metrics the service does not export (renamed? add external ones "
        f"to EXTERNAL): {json.dumps(missing, indent=2)}"
    )
    assert {n for n in used if n.startswith("profiler_training_")} <= exported
    assert {n for n in used if n.startswith("profiler_latest_")} <= exported


def test_every_metric_the_fleet_dashboard_uses_is_exported_by_the_hub(tmp_path):
    """A real `profiler-service hub` over a bucket (a file:// one) holding a job's snapshots, one
    of them pinned (so the baseline series exist), with a sidecar registered."""
    from datetime import UTC, datetime, timedelta

    from helpers import start_hub
    from s3_server import wait_until

    from profiler_service.analysis.models import Finding, Severity, StepTime, Summary
    from profiler_service.models import CaptureOptions, Snapshot
    from profiler_service.store.bucket_client import BucketClient

    dashboard = json.loads((DEPLOY / "grafana/dashboards/profiler-fleet.json").read_text())
    used = {n for p in dashboard["panels"] for t in p["targets"] for n in metric_names(t["expr"])}
    used |= {
        v["definition"].split("(", 1)[1].split(",")[0]
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    }
    bucket = tmp_path / "bucket"
    mirror = BucketClient(f"file://{bucket}")
    now = datetime.now(UTC)
    for i in range(2):
        mirror.write_doc(
            Snapshot(
                id=f"2026010{i}-000000-trainer-{i:012x}", status="ready", target="trainer",
                namespace="ml", pod="trainer-0", pinned=i == 0,
                created_at=now - timedelta(hours=2 - i),
                capture=CaptureOptions(duration_ms=500, host_tracer_level=2,
                                       python_tracer_level=0, device_tracer_level=1),
                summary=Summary(bottleneck="input", step_time=StepTime(count=5, avg_ms=100 + i)),
                findings=[Finding(rule="input_bound", severity=Severity.WARNING, title="t")],
            )
        )  # fmt: skip
    hub = start_hub(
        tmp_path / "hub",
        {"PROFILER_STORE_URL": f"file://{bucket}", "PROFILER_HUB_SYNC_INTERVAL_S": "0.5"},
    )
    try:
        record = {"name": "trainer-0", "namespace": "ml", "targets": ["trainer"],
                  "url": "http://127.0.0.1:9"}  # fmt: skip
        assert httpx.put(f"{hub.url}/sidecars/trainer-0", json=record).status_code == 200
        with hub.client() as client:
            wait_until(lambda: client.get("/profiles").json()["count"] == 2, 30, "the sync")
            client.post("/webhooks/alertmanager", json={"alerts": [{"labels": {"pod": "x"}}]})
        exported = scrape(hub.url)
    finally:
        hub.stop()
    missing = sorted(used - exported)
    assert not missing, f"the fleet dashboard reads metrics the hub does not export: {missing}"
