"""helm/profiler-service: lints, installs (client dry run, Helm v4's own engine) for every values
combination, and every rendered object validates against the Kubernetes API schemas.

The Prometheus Operator objects (ServiceMonitor, PodMonitor, PrometheusRule) have no schema in
kubernetes-validate: they are checked structurally here (selectors and port names match what the
chart renders), and the PrometheusRule's groups pass `promtool check rules`.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from deploy_tools import (
    CHART,
    NAMESPACE,
    RELEASE,
    install_dry_run,
    install_error,
    lint,
    run_tool,
    validate_kubernetes,
)

from profiler_service import __version__
from profiler_service.config import HubSettings, Settings

OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}

COMBINATIONS = {
    "defaults": {},
    "deployment-plain-container-pvc-insecure": {
        "training": {"kind": "Deployment", "image": "trainer:1", "metricsPort": 9464},
        "sidecar": {"native": False, "insecure": True},
        "secret": {"create": False},
        "store": {
            "type": "persistentVolumeClaim",
            "persistentVolumeClaim": {"existingClaim": "team-profiles"},
        },
        "metrics": {"scrapeAnnotations": False},
    },
    "everything-on": {
        "training": {
            "image": "trainer:1",
            "command": ["python", "train.py"],
            "args": ["--epochs", "3"],
            "env": [{"name": "DATA", "value": "/data"}],
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "metricsPort": 9464,
        },
        "sidecar": {
            "publicUrl": "https://profiler.example",
            "settings": {
                "duration_max_s": 10,
                "webhook_target_rules": [
                    {"label": "pod", "pattern": "trainer-.*", "target": "trainer"}
                ],
                "grafana_url": "http://grafana:3000",
            },
        },
        "secret": {"webhookToken": "hook", "webhookHmacSecret": "sign", "grafanaToken": "g"},
        "store": {
            "type": "persistentVolumeClaim",
            "persistentVolumeClaim": {"accessModes": ["ReadWriteMany"], "storageClassName": "nfs"},
        },
        "xprof": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}},
        "prometheusRule": {
            "enabled": True,
            "gpuUnderused": {"metric": "profiler_gpu_utilization_ratio"},
        },
        "networkPolicy": {"enabled": True},
    },
    "multi-worker-discovery": {
        "training": {"kind": "Deployment", "image": "trainer:1"},
        "targetDiscovery": "tf-config:///profiles/tf_config.json?tasks=chief,worker",
        "store": {
            "type": "persistentVolumeClaim",
            "persistentVolumeClaim": {"accessModes": ["ReadWriteMany"]},
        },
    },
    "existing-secret-own-pod-spec": {
        "training": {"kind": "none"},
        "secret": {"create": False, "existingSecret": "profiler-credentials"},
        "metrics": {"podMonitor": {"enabled": True}},
        "prometheusRule": {"enabled": True, "podRegex": "my-job-.*"},
        "networkPolicy": {"enabled": True, "from": [{"namespaceSelector": {}}]},
    },
}


def by_kind(docs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


def pod_spec(docs: list[dict]) -> tuple[dict, dict]:
    """(pod template metadata, pod spec) of the training workload."""
    workload = next(
        d
        for d in docs
        if d["kind"] in ("Job", "Deployment")
        and "app.kubernetes.io/component" not in d["metadata"]["labels"]  # not the XProf UI
    )
    return workload["spec"]["template"]["metadata"], workload["spec"]["template"]["spec"]


def values_have_workload(docs: list[dict]) -> bool:
    return any(
        d["kind"] in ("Job", "Deployment")
        and "app.kubernetes.io/component" not in d["metadata"]["labels"]
        for d in docs
    )


def sidecar_of(spec: dict) -> dict:
    containers = spec.get("initContainers", []) + spec["containers"]
    return next(c for c in containers if c["name"] == "profiler-service")


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def check_operator_object(doc: dict, docs: list[dict], tmp_path: Path) -> None:
    assert doc["apiVersion"] == "monitoring.coreos.com/v1", doc["apiVersion"]
    spec = doc["spec"]
    if doc["kind"] == "PrometheusRule":
        rules = tmp_path / f"{doc['metadata']['name']}.rules.yml"
        rules.write_text(yaml.safe_dump({"groups": spec["groups"]}))
        assert "SUCCESS" in run_tool("promtool", "check", "rules", str(rules))
        return
    selector = spec["selector"]["matchLabels"]
    endpoints = spec["endpoints" if doc["kind"] == "ServiceMonitor" else "podMetricsEndpoints"]
    assert endpoints and all(e["path"] == "/metrics" for e in endpoints)
    if doc["kind"] == "ServiceMonitor":
        service = next(
            d for d in docs if d["kind"] == "Service" and "xprof" not in d["metadata"]["name"]
        )
        assert selector.items() <= service["metadata"]["labels"].items()
        port_names = {p["name"] for p in service["spec"]["ports"]}
    else:
        port_names = {"http", "job-metrics"}
        if values_have_workload(docs):
            metadata, spec_ = pod_spec(docs)
            assert selector.items() <= metadata["labels"].items()
            containers = spec_.get("initContainers", []) + spec_["containers"]
            port_names = {p["name"] for c in containers for p in c.get("ports", [])}
    assert {e["port"] for e in endpoints} <= port_names


@pytest.mark.parametrize("name", COMBINATIONS)
def test_chart_lints_installs_and_validates(name, tmp_path):
    values = COMBINATIONS[name]
    report = lint(values)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report
    docs = install_dry_run(values)
    assert docs, "nothing rendered"
    for doc in docs:
        if doc["kind"] in OPERATOR_KINDS:
            check_operator_object(doc, docs, tmp_path)
        else:
            validate_kubernetes(doc)
    kinds = by_kind(docs)
    assert values_have_workload(docs) == (values.get("training", {}).get("kind") != "none")
    if name == "everything-on":
        assert set(kinds) >= {
            "Job", "Secret", "Service", "PersistentVolumeClaim", "Deployment",
            "ServiceMonitor", "PodMonitor", "PrometheusRule", "NetworkPolicy",
        }  # fmt: skip


def test_sidecar_shares_the_store_and_dials_the_job_over_localhost(monkeypatch):
    docs = install_dry_run(COMBINATIONS["everything-on"])
    _, spec = pod_spec(docs)
    sidecar = sidecar_of(spec)
    training = next(c for c in spec["containers"] if c["name"] == "training")
    # The TF profiler server writes the capture itself: the same volume at the same path.
    mounts = [
        {m["mountPath"] for m in c["volumeMounts"] if m["name"] == "profiler-store"}
        for c in (sidecar, training)
    ]
    assert mounts == [{"/profiles"}, {"/profiles"}]
    env = env_of(sidecar)
    assert env["PROFILER_STORE"]["value"] == "/profiles"
    assert env["PROFILER_TARGETS"]["value"] == "trainer=grpc://127.0.0.1:6009"
    assert env_of(training)["TF_PROFILER_PORT"]["value"] == "6009"
    assert env_of(training)["DATA"]["value"] == "/data"
    assert training["command"] == ["python", "train.py"]
    assert env["PROFILER_HOST"]["value"] == "0.0.0.0"
    assert (
        env["PROFILER_TENSORBOARD_URL"]["value"]
        == f"http://{RELEASE}-profiler-xprof.{NAMESPACE}.svc:8791"
    )
    assert env["PROFILER_DURATION_MAX_S"]["value"] == "10"
    rules = json.loads(env["PROFILER_WEBHOOK_TARGET_RULES"]["value"])
    # Every setting the chart writes is one the service accepts (pydantic parses it).
    for key, entry in env.items():
        if key.startswith("PROFILER_") and "value" in entry:
            monkeypatch.setenv(key, entry["value"])
    settings = Settings(api_token="t")
    assert (
        settings.capture.targets[0].workers == ["127.0.0.1:6009"]
        and settings.webhook.target_rules[0].pattern == rules[0]["pattern"]
    )
    # Native sidecar: an init container that keeps running and does not hold the Job open.
    assert sidecar in spec["initContainers"] and sidecar["restartPolicy"] == "Always"


def test_a_multi_worker_target_is_found_where_target_discovery_says(monkeypatch):
    docs = install_dry_run(COMBINATIONS["multi-worker-discovery"])
    env = env_of(sidecar_of(pod_spec(docs)[1]))
    target = env["PROFILER_TARGETS"]["value"]
    assert target == "trainer=tf-config:///profiles/tf_config.json?tasks=chief,worker"
    monkeypatch.setenv("PROFILER_TARGETS", target)
    discovery = Settings(api_token="t").capture.targets[0].discover
    assert (discovery.source, discovery.path, discovery.tasks) == (
        "tf-config",
        "/profiles/tf_config.json",
        ["chief", "worker"],
    )


def test_the_memory_watch_shares_the_pods_processes_only_when_asked(monkeypatch):
    """watchProcess turns on shareProcessNamespace (the sidecar reads the job's /proc); the pod
    name and namespace always reach the Prometheus lead-up queries through the downward API."""
    _, spec = pod_spec(install_dry_run({}))
    env = env_of(sidecar_of(spec))
    assert "shareProcessNamespace" not in spec and "PROFILER_WATCH_PROCESS" not in env
    assert env["PROFILER_POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["PROFILER_POD_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    _, spec = pod_spec(install_dry_run({"sidecar": {"watchProcess": "python .*train"}}))
    assert spec["shareProcessNamespace"] is True
    watch = env_of(sidecar_of(spec))["PROFILER_WATCH_PROCESS"]["value"]
    monkeypatch.setenv("PROFILER_WATCH_PROCESS", watch)
    assert Settings(api_token="t").lookback.watch_process == "python .*train"


def test_py_spy_shares_the_pods_processes_and_grants_ptrace_only_when_asked(monkeypatch):
    """sidecar.pySpy.enabled: the sidecar sees the job's processes and may trace them (its
    image's py-spy carries cap_sys_ptrace, which a non-root user gets only with privilege
    escalation allowed); off, the sidecar keeps every capability dropped."""
    _, spec = pod_spec(install_dry_run({}))
    assert "PROFILER_PY_SPY" not in env_of(sidecar_of(spec))
    assert sidecar_of(spec)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    _, spec = pod_spec(install_dry_run({"sidecar": {"pySpy": {"enabled": True}}}))
    sidecar = sidecar_of(spec)
    assert spec["shareProcessNamespace"] is True
    security = sidecar["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert security["allowPrivilegeEscalation"] is True
    assert security["readOnlyRootFilesystem"] is True and security["runAsNonRoot"] is True
    monkeypatch.setenv("PROFILER_PY_SPY", env_of(sidecar)["PROFILER_PY_SPY"]["value"])
    assert Settings(api_token="t").capture.py_spy is True
    # the training container is untouched
    training = next(c for c in spec["containers"] if c["name"] == "training")
    assert "SYS_PTRACE" not in json.dumps(training)


def test_the_jobs_metrics_reach_the_sidecar_and_prometheus_when_it_serves_them(monkeypatch):
    """training.metricsPort: the job serves its step metrics on the pod's address (the
    PodMonitor scrapes them) and the sidecar reads them over localhost for each snapshot's
    capture cost; without it, neither is set."""
    _, spec = pod_spec(install_dry_run({}))
    assert "PROFILER_JOB_METRICS_URL" not in env_of(sidecar_of(spec))
    _, spec = pod_spec(install_dry_run({"training": {"metricsPort": 9464}}))
    training = env_of(next(c for c in spec["containers"] if c["name"] == "training"))
    assert training["PROFILER_JOB_METRICS_PORT"]["value"] == "9464"
    assert training["PROFILER_JOB_METRICS_ADDR"]["value"] == "0.0.0.0"
    url = env_of(sidecar_of(spec))["PROFILER_JOB_METRICS_URL"]["value"]
    monkeypatch.setenv("PROFILER_JOB_METRICS_URL", url)
    assert Settings(api_token="t").lookback.job_metrics_url == "http://127.0.0.1:9464/metrics"


def test_secure_defaults():
    docs = install_dry_run({})
    metadata, spec = pod_spec(docs)
    sidecar = sidecar_of(spec)
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] != 0
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    security = sidecar["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {"requests", "limits"} <= sidecar["resources"].keys()
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    # It binds 0.0.0.0, so it gets the API token from the Secret (never PROFILER_INSECURE).
    env = env_of(sidecar)
    assert "PROFILER_INSECURE" not in env
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert env["PROFILER_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "api-token",
    }
    assert len(secret["data"]["api-token"]) > 40
    assert metadata["annotations"]["prometheus.io/port"] == "8080"
    # A read-only root filesystem: /tmp is a volume.
    assert {"name": "profiler-tmp", "mountPath": "/tmp"} in sidecar["volumeMounts"]


def test_insecure_must_be_explicit_and_existing_secrets_are_used():
    insecure = sidecar_of(
        pod_spec(install_dry_run(COMBINATIONS["deployment-plain-container-pvc-insecure"]))[1]
    )
    assert env_of(insecure)["PROFILER_INSECURE"]["value"] == "true"
    assert "PROFILER_API_TOKEN" not in env_of(insecure)
    docs = install_dry_run({"secret": {"create": False, "existingSecret": "creds"}})
    assert not [d for d in docs if d["kind"] == "Secret"]
    env = env_of(sidecar_of(pod_spec(docs)[1]))
    assert env["PROFILER_API_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "creds"
    assert env["PROFILER_WEBHOOK_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"training": {"kind": "CronJob"}},
            "at '/training/kind': value must be one of 'Job', 'Deployment', 'none'",
        ),
        ({"training": {"image": ""}}, "at '/training/image': minLength"),
        (
            {"store": {"mountPath": "profiles"}},
            "at '/store/mountPath': 'profiles' does not match pattern",
        ),
        (
            {"sidecar": {"settings": {"duration_max": 5}}},
            "at '/sidecar/settings': additional properties 'duration_max' not allowed",
        ),
        # A misspelt hub setting, and a ledger key given to the sidecar, where it does nothing.
        (
            {"hub": {"enabled": True, "storeUrl": "s3://b/f", "settings": {"hub_sidecar_ttl": 9}}},
            "at '/hub/settings': additional properties 'hub_sidecar_ttl' not allowed",
        ),
        (
            {"sidecar": {"settings": {"hub_prometheus_url": "http://prometheus:9090"}}},
            "at '/sidecar/settings': additional properties 'hub_prometheus_url' not allowed",
        ),
        (
            {"hub": {"enabled": True, "storeUrl": "s3://b/f", "settings": {"hub_url": "http://x"}}},
            "at '/hub/settings': additional properties 'hub_url' not allowed",
        ),
        (
            {"hub": {"settings": {"hub_ledger_bucket_s": [3600]}}},
            "at '/hub/settings/hub_ledger_bucket_s'",
        ),
        ({"sidecar": {"port": 80000}}, "at '/sidecar/port'"),
        ({"sidecar": {"pySpy": {"enable": True}}}, "at '/sidecar/pySpy': additional properties"),
        ({"targetName": "Trainer_1"}, "at '/targetName'"),
        ({"targetDiscovery": "http://workers:6009"}, "at '/targetDiscovery'"),
        ({"xprof": {"enabled": True}}, "at '/store/type': value must be 'persistentVolumeClaim'"),
        (
            {"prometheusRule": {"gpuUnderused": {"for": "ten minutes"}}},
            "at '/prometheusRule/gpuUnderused/for'",
        ),
        ({"secret": {"create": False}}, "refuses that without PROFILER_API_TOKEN"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_wrong_values_fail_at_install_with_a_clear_message(values, message):
    assert message in install_error(values)


def test_schema_lists_exactly_the_settings_the_chart_does_not_set_itself():
    """Generated by scripts/gen-docs (docs_reference/chart_schema.py): each process's own
    settings, their type and description, less what the chart's templates set."""
    from profiler_service.docs_reference import chart_schema

    schema = json.loads((CHART / "values.schema.json").read_text())
    offered = {
        key: schema["properties"][key]["properties"]["settings"] for key in ("sidecar", "hub")
    }
    for key, root, chart_sets in (
        ("sidecar", Settings, chart_schema.SIDECAR_CHART_SETS),
        ("hub", HubSettings, chart_schema.HUB_CHART_SETS),
    ):
        assert offered[key]["additionalProperties"] is False
        assert set(offered[key]["properties"]) == set(root.owners) - chart_sets, key
        assert set(root.owners) >= chart_sets, key
        assert all(entry.get("description") for entry in offered[key]["properties"].values())
    sidecar, hub = (offered[k]["properties"] for k in ("sidecar", "hub"))
    assert sidecar["duration_max_s"]["type"] == ["number", "string"]
    assert sidecar["capture_attempts"]["type"] == ["integer", "string"]
    assert hub["hub_gpu_hour_prices"]["type"] == ["object", "string"]
    # The ledger is the hub's, the heartbeat the sidecar's; both serve webhooks.
    assert "hub_prometheus_url" in hub and "hub_prometheus_url" not in sidecar
    assert "hub_heartbeat_s" in sidecar and "hub_heartbeat_s" not in hub
    assert "webhook_target_rules" in hub and "webhook_target_rules" in sidecar
    assert not chart_schema.stale(), "values.schema.json differs from the code: scripts/gen-docs"


def docs_values(name: str) -> dict:
    """The values file docs/fleet.md shows as `# <name>: ...`."""
    text = (CHART.parents[1] / "docs" / "fleet.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
    return yaml.safe_load(next(b for b in blocks if b.startswith(f"# {name}:")))


def test_the_fleet_values_of_the_docs_install_a_hub_with_its_ledger_and_no_secret_in_them(
    monkeypatch,
):
    """docs/fleet.md's fleet-values.yaml: the ledger's settings reach the hub as it reads them,
    and every credential comes from the user's Secret, none from the values."""
    values = docs_values("fleet-values.yaml")
    assert not values.get("secret", {}).keys() - {"existingSecret", "create"}
    docs = install_dry_run(values, release="fleet")
    for doc in docs:
        validate_kubernetes(doc)
    assert not [d for d in docs if d["kind"] == "Secret"]
    deployment, service = hub_objects(docs)
    assert service["metadata"]["name"] == "fleet-profiler-hub"
    env = env_of(deployment["spec"]["template"]["spec"]["containers"][0])
    for name in ("PROFILER_API_TOKEN", "PROFILER_HUB_TOKEN", "PROFILER_STORE_OPTIONS"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "fleet-profiler-credentials"
    for key, entry in env.items():
        if key.startswith("PROFILER_") and "value" in entry:
            monkeypatch.setenv(key, entry["value"])
    settings = HubSettings(api_token="t", hub_token="fleet-secret")
    assert settings.ledger.prometheus_url == "http://prometheus-operated.monitoring.svc:9090"
    assert settings.ledger.gpu_hour_prices == {"A100": 2.9, "H100": 4.5, "*": 2.0}
    assert settings.ledger.gpu_pod_label == "exported_pod"
    assert settings.storage.store_url == "s3://team-profiles/fleet"
    assert settings.explain.enabled is True

    job = docs_values("job-values.yaml")
    assert not job.get("secret", {}).keys() - {"existingSecret", "create"}
    sidecar = env_of(sidecar_of(pod_spec(install_dry_run(job))[1]))
    assert (
        sidecar["PROFILER_HUB_URL"]["value"] == f"http://{service['metadata']['name']}.ml.svc:8080"
    )
    assert sidecar["PROFILER_STORE_OPTIONS"]["valueFrom"]["secretKeyRef"]["name"] == (
        "profiler-credentials"
    )


def chart_version() -> str:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]


def test_the_chart_runs_the_release_it_ships_with():
    """The chart's appVersion is the package's: an image tag left unset pulls this release."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__ == chart_version()
    # The image template's own default (other charts include it without this chart's .Chart).
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert f'.Values.image.tag | default "{__version__}"' in helpers


def test_named_templates_work_from_a_chart_that_owns_its_pod_spec(tmp_path):
    """A user's chart with profiler-service as a dependency puts the sidecar in its own pod."""
    parent = tmp_path / "my-training"
    (parent / "templates").mkdir(parents=True)
    shutil.copytree(CHART, parent / "charts" / "profiler-service")
    (parent / "Chart.yaml").write_text(
        "apiVersion: v2\nname: my-training\nversion: 1.0.0\n"
        f"dependencies:\n  - name: profiler-service\n    version: {chart_version()}\n"
    )
    (parent / "values.yaml").write_text(
        "profiler-service:\n  training: {kind: none}\n  targetName: mine\n"
    )
    (parent / "templates" / "statefulset.yaml").write_text(
        """\
{{- $profiler := dict "Values" (index .Values "profiler-service") "Release" .Release }}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Release.Name }}-worker
spec:
  serviceName: {{ .Release.Name }}-worker
  selector:
    matchLabels: {app: worker}
  template:
    metadata:
      labels:
        app: worker
        {{- include "profiler-service.selectorLabels" $profiler | nindent 8 }}
    spec:
      initContainers:
        {{- include "profiler-service.sidecar" $profiler | nindent 8 }}
      containers:
        - name: worker
          image: my-trainer:2
          env: {{- include "profiler-service.trainingEnv" $profiler | nindent 12 }}
          volumeMounts: {{- include "profiler-service.storeMount" $profiler | nindent 12 }}
      volumes: {{- include "profiler-service.volumes" $profiler | nindent 8 }}
"""
    )
    report = lint({}, chart=parent)
    assert not report["errors"], report
    docs = install_dry_run({}, chart=parent)
    for doc in docs:
        if doc["kind"] not in OPERATOR_KINDS:
            validate_kubernetes(doc)
    kinds = by_kind(docs)
    assert "Job" not in kinds and "Deployment" not in kinds
    spec = kinds["StatefulSet"][0]["spec"]["template"]["spec"]
    sidecar = sidecar_of(spec)
    assert env_of(sidecar)["PROFILER_TARGETS"]["value"] == "mine=grpc://127.0.0.1:6009"
    assert env_of(spec["containers"][0])["TF_PROFILER_PORT"]["value"] == "6009"
    service = kinds["Service"][0]
    labels = kinds["StatefulSet"][0]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


HUB_VALUES = {
    "hub": {"enabled": True, "settings": {"hub_sidecar_ttl_s": 90}},
    "sidecar": {"settings": {"store_url": "s3://fleet-profiles/team-a"}},
    "secret": {"hubToken": "fleet-secret", "storeOptions": '{"anon": false}'},
}


def hub_objects(docs: list[dict]) -> tuple[dict, dict]:
    deployment = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-hub")
    )
    service = next(
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-hub")
    )
    return deployment, service


def test_the_hub_is_off_by_default_and_the_sidecar_registers_nowhere():
    docs = install_dry_run({})
    assert not [d for d in docs if d["metadata"]["name"].endswith("-hub")]
    env = env_of(sidecar_of(pod_spec(docs)[1]))
    assert "PROFILER_HUB_URL" not in env
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert "hub-token" not in secret["data"]


def test_the_hub_renders_and_the_sidecar_points_at_it(monkeypatch, tmp_path):
    report = lint(HUB_VALUES)
    assert not [m for m in report["messages"] if m["severity"] >= 2] and not report["errors"]
    docs = install_dry_run(HUB_VALUES)
    for doc in docs:
        validate_kubernetes(doc)
    deployment, service = hub_objects(docs)
    pod = deployment["spec"]["template"]
    # Two replicas, spread over nodes, one at most down through voluntary disruptions.
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    budget = next(d for d in docs if d["kind"] == "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    spread = pod["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"] == pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    # The sidecar's Service never selects the hub's pod (both listen on 8080).
    sidecar_service = next(
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == f"{RELEASE}-profiler"
    )
    assert not sidecar_service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    hub = pod["spec"]["containers"][0]
    assert hub["args"] == ["hub"]
    hub_env = env_of(hub)
    assert hub_env["PROFILER_STORE_URL"]["value"] == "s3://fleet-profiles/team-a"
    assert hub_env["PROFILER_HUB_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "hub-token"
    assert hub_env["PROFILER_STORE_OPTIONS"]["valueFrom"]["secretKeyRef"]["key"] == "store-options"
    assert hub["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "hub-index", "mountPath": "/index"} in hub["volumeMounts"]
    # It migrates its index before it answers (85 s at a million snapshots, 0001 -> 0002):
    # liveness starts only once it has, up to 10 minutes on.
    startup = hub["startupProbe"]
    assert startup["httpGet"]["path"] == "/healthz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600

    env = env_of(sidecar_of(pod_spec(docs)[1]))
    hub_url = f"http://{RELEASE}-profiler-hub.{NAMESPACE}.svc:8080"
    assert env["PROFILER_HUB_URL"]["value"] == hub_url
    assert env["PROFILER_HUB_ADVERTISE_URL"]["value"] == "http://$(POD_IP):8080"
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["PROFILER_HUB_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "hub-token"
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert secret["data"]["hub-token"] == "ZmxlZXQtc2VjcmV0"  # base64 of fleet-secret

    # What the chart writes is what the hub and the sidecar accept (Kubernetes expands $(POD_IP)).
    for key, entry in hub_env.items():
        if key.startswith("PROFILER_") and "value" in entry:
            monkeypatch.setenv(key, entry["value"])
    settings = HubSettings(api_token="t", hub_token="fleet-secret")
    assert settings.fleet.sidecar_ttl_s == 90 and settings.server.port == 8080


def test_a_job_release_registers_with_another_releases_hub():
    values = {"hub": {"url": "http://fleet-profiler-hub.ml.svc:8080"}}
    docs = install_dry_run(values)
    assert not [d for d in docs if d["metadata"]["name"].endswith("-hub")]
    env = env_of(sidecar_of(pod_spec(docs)[1]))
    assert env["PROFILER_HUB_URL"]["value"] == "http://fleet-profiler-hub.ml.svc:8080"


def test_one_hub_replica_has_no_disruption_budget():
    docs = install_dry_run({**HUB_VALUES, "hub": {**HUB_VALUES["hub"], "replicas": 1}})
    deployment, _ = hub_objects(docs)
    assert deployment["spec"]["replicas"] == 1
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def test_the_hub_needs_the_fleets_bucket():
    assert "hub.enabled needs hub.storeUrl" in install_error({"hub": {"enabled": True}})


def test_tenants_are_a_secret_mounted_as_a_directory_that_the_hub_accepts(tmp_path):
    """A subPath mount would never see the Secret's updates: the hub re-reads the file."""
    from profiler_service.config import HubSettings

    tokens = [{"name": "team-a", "sha256": "ab" * 32, "read": ["team-a"], "capture": ["team-a"]},
              {"name": "platform", "token": "x" * 32, "read": ["*"], "capture": ["*"]}]  # fmt: skip
    docs = install_dry_run(
        {**HUB_VALUES, "hub": {**HUB_VALUES["hub"], "tenants": {"tokens": tokens}}}
    )
    for doc in docs:
        validate_kubernetes(doc)
    deployment, _ = hub_objects(docs)
    pod = deployment["spec"]["template"]["spec"]
    hub = pod["containers"][0]
    path = Path(env_of(hub)["PROFILER_TOKENS_FILE"]["value"])
    mount = next(m for m in hub["volumeMounts"] if m["name"] == "tenants")
    assert mount["mountPath"] == str(path.parent) and "subPath" not in mount and mount["readOnly"]
    volume = next(v for v in pod["volumes"] if v["name"] == "tenants")
    secret = next(d for d in docs if d["metadata"]["name"] == volume["secret"]["secretName"])
    written = tmp_path / path.name
    written.write_bytes(base64.b64decode(secret["data"]["tokens.json"]))
    assert HubSettings(tokens_file=written, api_token="t").fleet.tokens_file == written

    theirs = {**HUB_VALUES, "hub": {**HUB_VALUES["hub"], "tenants": {"existingSecret": "teams"}}}
    docs = install_dry_run(theirs)
    assert not [d for d in docs if d["metadata"]["name"].endswith("-hub-tenants")]
    pod = hub_objects(docs)[0]["spec"]["template"]["spec"]
    assert (
        next(v for v in pod["volumes"] if v["name"] == "tenants")["secret"]["secretName"] == "teams"
    )
    assert "PROFILER_TOKENS_FILE" not in env_of(hub_objects(install_dry_run(HUB_VALUES))[0][
        "spec"]["template"]["spec"]["containers"][0])  # fmt: skip


def test_the_network_policy_lets_the_hub_reach_the_sidecar_port_and_nothing_else_in():
    values = {"hub": {"url": "http://fleet-profiler-hub.fleet.svc:8080"},
              "networkPolicy": {"enabled": True}, "training": {"metricsPort": 9464}}  # fmt: skip
    docs = install_dry_run(values)
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    validate_kubernetes(policy)
    hub_rule = next(r for r in policy["spec"]["ingress"] if "namespaceSelector" in r["from"][0])
    peer = hub_rule["from"][0]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "fleet"}
    assert hub_rule["ports"] == [{"port": 8080, "protocol": "TCP"}]  # not 9464, not 6009
    # The hub's own pods carry the labels the rule admits.
    hub_docs = install_dry_run({**HUB_VALUES, "networkPolicy": {"enabled": True}})
    hub_pod = hub_objects(hub_docs)[0]["spec"]["template"]["metadata"]["labels"]
    assert peer["podSelector"]["matchLabels"].items() <= hub_pod.items()
    # And the hub's: its port only, from this namespace and from the sidecars of any namespace.
    hub_policy = next(d for d in hub_docs if d["kind"] == "NetworkPolicy"
                      and d["metadata"]["name"].endswith("-hub"))  # fmt: skip
    validate_kubernetes(hub_policy)
    assert hub_policy["spec"]["podSelector"]["matchLabels"].items() <= hub_pod.items()
    (rule,) = hub_policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8080, "protocol": "TCP"}]
    sidecar_labels = pod_spec(hub_docs)[0]["labels"]
    anywhere = next(p for p in rule["from"] if "namespaceSelector" in p)
    assert anywhere["namespaceSelector"] == {}
    assert anywhere["podSelector"]["matchLabels"].items() <= sidecar_labels.items()
    # Only the sidecars': not XProf's pods (the chart's name too, with a component).
    assert anywhere["podSelector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/component", "operator": "DoesNotExist"}
    ]
    assert "app.kubernetes.io/component" not in sidecar_labels


def test_the_sidecar_names_its_workload_for_the_fleet(monkeypatch):
    env = env_of(sidecar_of(pod_spec(install_dry_run({}))[1]))
    assert env["PROFILER_WORKLOAD"]["value"] == RELEASE
    named = env_of(sidecar_of(pod_spec(install_dry_run({"workload": {"name": "bert-large"}}))[1]))
    assert named["PROFILER_WORKLOAD"]["value"] == "bert-large"
    label = "jobset.sigs.k8s.io/jobset-name"
    owned = env_of(sidecar_of(pod_spec(install_dry_run({"workload": {"fromLabel": label}}))[1]))
    assert owned["PROFILER_WORKLOAD"]["valueFrom"] == {
        "fieldRef": {"fieldPath": f"metadata.labels['{label}']"}
    }
    monkeypatch.setenv("PROFILER_WORKLOAD", "")  # the downward API's value for a missing label
    assert Settings(api_token="t").capture.workload is None


def test_the_hubs_index_on_postgresql_comes_from_a_secret_and_drops_the_index_volume():
    """With `hub.database`, every replica reads the URL from the Secret (never a plain value:
    it holds a password); /index keeps only the alert log, not a 2 GiB copy of the index."""
    database = {"existingSecret": "fleet-db", "key": "dsn"}
    docs = install_dry_run({**HUB_VALUES, "hub": {**HUB_VALUES["hub"], "database": database}})
    for doc in docs:
        validate_kubernetes(doc)
    pod = hub_objects(docs)[0]["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    reference = env["PROFILER_HUB_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert reference == {"name": "fleet-db", "key": "dsn"}
    index = next(v for v in pod["volumes"] if v["name"] == "hub-index")
    assert index["emptyDir"]["sizeLimit"] == "256Mi"

    pod = hub_objects(install_dry_run(HUB_VALUES))[0]["spec"]["template"]["spec"]
    assert "PROFILER_HUB_DATABASE_URL" not in env_of(pod["containers"][0])
    index = next(v for v in pod["volumes"] if v["name"] == "hub-index")
    assert index["emptyDir"]["sizeLimit"] == "2Gi"
    assert "database" in install_error(
        {**HUB_VALUES, "hub": {**HUB_VALUES["hub"], "database": {"url": "postgresql://x"}}}
    )
