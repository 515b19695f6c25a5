"""deploy/: Prometheus rules and config, Alertmanager routing and Grafana provisioning are valid.

promtool and amtool come from the Debian packages (scripts/install-system-packages). Grafana is
not packaged for Debian, so its files are checked for the structure Grafana's provisioning reads;
their metric names are checked against the real service in test_metric_names.py.
"""

from __future__ import annotations

import json

import yaml
from deploy_tools import DEPLOY, metric_names, rule_groups, run_tool

PROMETHEUS = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"


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
    # It posts to the fleet hub (the name deploy/alertmanager/alertmanager.yml uses), which
    # routes each alert by its namespace and pod: the rule's query keeps both.
    assert receiver["settings"]["url"].startswith("http://profiler-service-hub:8080/")
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
