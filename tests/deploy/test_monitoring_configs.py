"""deploy/: Prometheus rules and config, Alertmanager routing and Grafana provisioning are valid.

promtool and amtool come from the Debian packages (scripts/install-system-packages). Grafana is
not packaged for Debian, so its files are checked for the structure Grafana's provisioning reads;
their metric names are checked against the real service in test_metric_names.py.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import yaml
from deploy_tools import DEPLOY, install_dry_run, metric_names, rule_groups, run_tool

PROMETHEUS = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"
ALERTMANAGER = DEPLOY / "alertmanager" / "alertmanager.yml"


def test_every_rules_file_passes_promtool_and_its_unit_tests():
    rule_files = sorted(PROMETHEUS.glob("*.rules.yml"))
    assert {p.name for p in rule_files} >= {
        "profiler-alerts.rules.yml",
        "profiler-training.rules.yml",
    }
    for path in rule_files:
        assert "SUCCESS" in run_tool("promtool", "check", "rules", str(path))
    for path in sorted(PROMETHEUS.glob("*.test.yml")):
        assert "SUCCESS" in run_tool("promtool", "test", "rules", str(path))


def test_prometheus_config_with_every_rules_file_passes_promtool(tmp_path):
    """The shipped prometheus.yml, and the same with the training rules added as
    docs/deployment.md says."""
    assert "valid prometheus config" in run_tool(
        "promtool", "check", "config", str(PROMETHEUS / "prometheus.yml")
    )
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    config["rule_files"] = [str(p) for p in sorted(PROMETHEUS.glob("*.rules.yml"))]
    combined = tmp_path / "prometheus.yml"
    combined.write_text(yaml.safe_dump(config))
    out = run_tool("promtool", "check", "config", str(combined))
    assert "valid prometheus config" in out
    assert out.count("rules found") == len(config["rule_files"]), out


def test_alertmanager_config_passes_amtool_and_routes_what_the_rules_label():
    path = DEPLOY / "alertmanager" / "alertmanager.yml"
    assert "SUCCESS" in run_tool("amtool", "check-config", str(path))
    routes = yaml.safe_load(path.read_text())["route"]["routes"]
    rules = [r for p in PROMETHEUS.glob("*.rules.yml") for g in rule_groups(p) for r in g["rules"]]
    alert_labels = [r.get("labels", {}) | {"alertname": r["alert"]} for r in rules if "alert" in r]
    for route in routes:
        for matcher in route.get("matchers", []):
            label, value = (s.strip().strip('"') for s in matcher.split("="))
            matched = [a["alertname"] for a in alert_labels if a.get(label) == value]
            assert matched, f"route {route['receiver']}: no alert rule sets {matcher}"
    # Every alert that asks for a capture reaches the webhook receiver.
    capture = [a["alertname"] for a in alert_labels if a.get("profile") == "true"]
    assert {"TrainingGpuUnderusedNvml", "TrainingStepTimeAboveBaseline"} <= set(capture)


def test_grafana_dashboard_has_the_panels_annotations_and_links():
    dashboard = json.loads((GRAFANA / "dashboards" / "profiler-service.json").read_text())
    assert dashboard["uid"] == "profiler-service"
    panels = {p["title"]: p for p in dashboard["panels"]}
    assert {"GPU utilisation", "Step time", "Captures", "Latest findings"} <= set(panels)
    assert len({p["id"] for p in dashboard["panels"]}) == len(panels)
    for panel in panels.values():
        assert panel["targets"] and all(metric_names(t["expr"]) for t in panel["targets"])
    links = [link["url"] for link in panels["Latest findings"]["fieldConfig"]["defaults"]["links"]]
    assert "${profiler_url}/profiles/${__data.fields.snapshot_id}/report" in links
    assert any(u.startswith("${xprof_url}/?run=${__data.fields.snapshot_id}") for u in links)
    annotations = dashboard["annotations"]["list"]
    tags = [a for a in annotations if a.get("target", {}).get("type") == "tags"]
    assert tags and tags[0]["target"]["tags"] == ["profiler-service"]  # what the service posts
    assert any("expr" in a for a in annotations)


def test_grafana_fleet_dashboard_has_the_fleet_panels_and_links():
    dashboard = json.loads((GRAFANA / "dashboards" / "profiler-fleet.json").read_text())
    assert dashboard["uid"] == "profiler-fleet"
    panels = {p["title"]: p for p in dashboard["panels"]}
    assert {
        "Live sidecars", "Jobs regressed", "Step time by job", "Step time against baseline",
        "Latest findings by job", "Findings by rule", "Alerts routed by the hub",
        "Waste by team", "Recoverable GPU-hours and cost by team",
    } <= set(panels)  # fmt: skip
    waste = panels["Waste by team"]["targets"][0]["expr"]
    assert 'state="idle"' in waste and "by (namespace, cause)" in waste
    assert len({p["id"] for p in dashboard["panels"]}) == len(panels)
    for panel in panels.values():
        names = {n for t in panel["targets"] for n in metric_names(t["expr"])}
        assert names and all(n.startswith("profiler_fleet_") for n in names), panel["title"]
    links = [
        link["url"] for link in panels["Latest findings by job"]["fieldConfig"]["defaults"]["links"]
    ]
    assert "${hub_url}/profiles/${__data.fields.snapshot_id}/report" in links
    assert "${hub_url}/fleet" in links
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "hub_url", "xprof_url"} <= variables


def test_grafana_provisioning_files():
    prov = GRAFANA / "provisioning"
    datasource = yaml.safe_load((prov / "datasources" / "prometheus.yaml").read_text())
    assert datasource["apiVersion"] == 1
    uid = datasource["datasources"][0]["uid"]
    providers = yaml.safe_load((prov / "dashboards" / "profiler-service.yaml").read_text())
    assert providers["providers"][0]["type"] == "file"
    contact = yaml.safe_load((prov / "alerting" / "contact-points.yaml").read_text())
    receiver = contact["contactPoints"][0]["receivers"][0]
    assert receiver["type"] == "webhook"
    assert receiver["settings"]["url"].endswith("/webhooks/grafana")
    # It posts to the fleet hub (where deploy/alertmanager/alertmanager.yml posts), which
    # routes each alert by its namespace and pod: the rule's query keeps both.
    assert urlsplit(receiver["settings"]["url"]).netloc == urlsplit(hub_webhook_url()).netloc
    assert receiver["settings"]["authorization_scheme"] == "Bearer"
    rules = yaml.safe_load((prov / "alerting" / "rules.yaml").read_text())
    rule = rules["groups"][0]["rules"][0]
    assert rule["notification_settings"]["receiver"] == contact["contactPoints"][0]["name"]
    assert rule["labels"]["profile"] == "true"
    assert rule["annotations"]["__dashboardUid__"] == "profiler-service"
    queries = [d for d in rule["data"] if d["datasourceUid"] != "__expr__"]
    assert queries and all(d["datasourceUid"] == uid for d in queries)
    assert all("by (namespace, pod)" in d["model"]["expr"] for d in queries)
    assert {d["refId"] for d in rule["data"]} >= {rule["condition"]}


def hub_webhook_url() -> str:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    receiver = next(r for r in config["receivers"] if r["name"] == "profiler-service")
    return receiver["webhook_configs"][0]["url"]


def test_alertmanager_posts_to_the_hub_service_the_chart_renders():
    """deploy/alertmanager names the hub the way the chart does: the Service of the release
    docs/fleet.md installs (`fleet`, namespace `ml`), on its port."""
    url = urlsplit(hub_webhook_url())
    host = url.hostname or ""
    assert re.fullmatch(r"[a-z0-9-]+-profiler-hub\.[a-z0-9-]+\.svc", host), (
        f"{host}: the chart's hub is <release>-profiler-hub.<namespace>.svc"
    )
    service_name, namespace = host.split(".")[:2]
    release = service_name.removesuffix("-profiler-hub")
    docs = install_dry_run(
        {"training": {"kind": "none"}, "hub": {"enabled": True, "storeUrl": "s3://b/fleet"}},
        release=release,
        namespace=namespace,
    )
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    assert service_name in services, f"the chart renders {sorted(services)}, not {service_name}"
    assert url.port in {p["port"] for p in services[service_name]["spec"]["ports"]}
    assert url.path == "/webhooks/alertmanager"
    dashboard = json.loads((GRAFANA / "dashboards" / "profiler-fleet.json").read_text())
    hub_url = next(v for v in dashboard["templating"]["list"] if v["name"] == "hub_url")
    assert urlsplit(hub_url["query"]).netloc == url.netloc


def _seconds(duration: str | None) -> float:
    """A Prometheus duration (`10m`, `1h30m`, absent: 0) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration or "0s")
    return sum(int(n) * units[u] for n, u in parts)


def _threshold(expr: str) -> float:
    """The number an alert's expression compares with (`... < 0.3`, `... > 1.5 * ...`)."""
    return float(re.search(r"[<>]\s*([0-9.]+)", " ".join(expr.split())).group(1))


def _chart_rules(gpu_metric: str) -> dict[str, dict]:
    docs = install_dry_run(
        {"prometheusRule": {"enabled": True, "gpuUnderused": {"metric": gpu_metric}}}
    )
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_the_deploy_rules_and_the_charts_prometheus_rule_agree():
    """One set of thresholds: deploy/prometheus's alerts fire as the chart's PrometheusRule does
    with its default values (the same `for`, threshold, metrics, labels and capture length);
    TrainingGpuUnderusedNvml is the chart's rule on profiler_gpu_utilization_ratio."""
    rules = [r for path in PROMETHEUS.glob("*.rules.yml") for g in rule_groups(path)
             for r in g["rules"]]  # fmt: skip
    deploy = {r["alert"]: r for r in rules if "alert" in r}
    recorded = {r["record"]: r["expr"] for r in rules if "record" in r}

    def reads(expr: str) -> set[str]:
        """The metrics an expression reads, through the recording rules it names."""
        names = metric_names(expr)
        return set().union(*(reads(recorded[n]) if n in recorded else {n} for n in names))

    pairs = [
        (name, deploy[name], rule)
        for name, rule in _chart_rules("DCGM_FI_PROF_GR_ENGINE_ACTIVE").items()
    ]
    nvml = _chart_rules("profiler_gpu_utilization_ratio")["TrainingGpuUnderused"]
    pairs.append(("TrainingGpuUnderusedNvml", deploy["TrainingGpuUnderusedNvml"], nvml))
    assert {name for name, _, _ in pairs} >= {
        "TrainingGpuUnderused", "TrainingGpuUnderusedNvml", "TrainingStepTimeAboveBaseline",
        "TrainingInputBound",
    }  # fmt: skip
    for name, ours, chart in pairs:
        assert _seconds(ours.get("for")) == _seconds(chart.get("for")), name
        assert _threshold(ours["expr"]) == _threshold(chart["expr"]), name
        assert reads(ours["expr"]) == reads(chart["expr"]), name
        for label in ("profile", "severity"):
            assert ours["labels"][label] == chart["labels"][label], (name, label)
        assert ours["annotations"].get("profile_duration") == chart["annotations"].get(
            "profile_duration"
        ), name
    # The GPU rule knows the ledger's default metric, DCGM_FI_DEV_GPU_UTIL, in both.
    for rule in (deploy["TrainingGpuUnderused"], _chart_rules("DCGM_FI_PROF_GR_ENGINE_ACTIVE")[
            "TrainingGpuUnderused"]):  # fmt: skip
        assert "DCGM_FI_DEV_GPU_UTIL" in metric_names(rule["expr"])
