"""An alert fires in a real Prometheus, a real Alertmanager posts it, a real job is captured.

Prometheus and Alertmanager (Debian packages `prometheus`, `prometheus-alertmanager`, installed by
scripts/install-system-packages) run on free 127.0.0.1 ports with their data under tmp_path and
are stopped by pid. The alert rules are deploy/prometheus/profiler-alerts.rules.yml, used as they
are but for their `for` (10 minutes, 15 s here); deploy/prometheus/prometheus.yml and
deploy/alertmanager/alertmanager.yml are copied with this test's addresses, token file and short
intervals templated in (every replacement is checked,
so the deploy files cannot drift away from what is tested). Prometheus scrapes the service and a
loopback stand-in of dcgm-exporter whose gauge the test sets; Grafana, which cannot run here, is
the loopback stand-in of tests/grafana_standin.py.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from alertmanager_server import ALERTMANAGER_YML, DEPLOY, binary, start_alertmanager, templated
from grafana_standin import GrafanaStandIn
from helpers import free_port, stop_process, wait_for_http, wait_for_status, wait_until

RULES = DEPLOY / "prometheus" / "profiler-alerts.rules.yml"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
WEBHOOK_TOKEN = "am-webhook-token"
GRAFANA_TOKEN = "glsa_e2e"


def run_check(*args: str) -> str:
    done = subprocess.run([binary(args[0]), *args[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_deploy_files_pass_promtool_and_amtool():
    assert "SUCCESS: 3 rules found" in run_check("promtool", "check", "rules", str(RULES))
    assert "is valid prometheus config" in run_check(
        "promtool", "check", "config", str(PROMETHEUS_YML)
    )
    assert "SUCCESS" in run_check(
        "promtool", "test", "rules", str(DEPLOY / "prometheus" / "profiler-alerts.test.yml")
    )
    assert "SUCCESS" in run_check("amtool", "check-config", str(ALERTMANAGER_YML))


class GaugeExporter:
    """A loopback stand-in for dcgm-exporter serving one gauge the test sets."""

    def __init__(self, labels: str, value: float):
        self.labels, self.value = labels, value
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                text = (
                    "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is "
                    "active.\n# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
                    f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{exporter.labels}}} {exporter.value}\n"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def processes() -> Iterator[_Processes]:
    """Start a server process logging to a file; every one (and any appended, as
    `start_alertmanager` does) is terminated by pid at teardown."""
    started = _Processes()
    yield started
    for proc in started:
        stop_process(proc, timeout_s=15)


class _Processes(list[subprocess.Popen]):
    def __call__(self, args: list[str], log: Path, ready_url: str) -> subprocess.Popen:
        proc = subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.append(proc)
        wait_for_http(proc, ready_url, log, args[0], timeout_s=30)
        return proc


def test_a_prometheus_alert_captures_the_job_once_per_cooldown(
    tmp_path, input_bound_job, service_factory, processes
):
    grafana = GrafanaStandIn(token=GRAFANA_TOKEN)
    exporter = GaugeExporter('gpu="0",namespace="ml",pod="trainer-0",container="main"', 0.95)
    try:
        run_alert_loop(tmp_path, input_bound_job, service_factory, processes, grafana, exporter)
    finally:
        exporter.close()
        grafana.close()


def run_alert_loop(tmp_path, job, service_factory, processes, grafana, exporter) -> None:
    service = service_factory(
        [f"trainer={job.address}"],
        {
            "PROFILER_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "PROFILER_WEBHOOK_TARGET_RULES": json.dumps(
                [{"label": "pod", "pattern": r"trainer-\d+", "target": "trainer"}]
            ),
            "PROFILER_GRAFANA_URL": grafana.url,
            "PROFILER_GRAFANA_TOKEN": GRAFANA_TOKEN,
        },
    )
    service_address = service.url.removeprefix("http://")

    # Alertmanager: the deploy routing, with this service's URL (the example routes to the
    # fleet hub; a sidecar takes the same payload); a still-firing alert is sent again after
    # 3 s: the second firing.
    am_url = start_alertmanager(tmp_path, service.url, WEBHOOK_TOKEN, processes, "3s")
    am_port = int(am_url.rsplit(":", 1)[1])

    # Prometheus: the deploy config with loopback addresses and 1 s intervals; the rules file is
    # deploy's own, its `for` shortened from 10 minutes to 15 s.
    rules = tmp_path / RULES.name
    rules.write_text(templated(RULES.read_text(), [(r"for: 10m$", "for: 15s", 1)]))
    prom_port = free_port()
    prom_config = tmp_path / "prometheus.yml"
    prom_config.write_text(
        templated(
            PROMETHEUS_YML.read_text(),
            [
                (r"(scrape|evaluation)_interval: \S+$", r"\1_interval: 1s", 2),
                (r"- profiler-alerts\.rules\.yml$", f"- {rules}", 1),
                (r'"alertmanager:9093"', f'"127.0.0.1:{am_port}"', 1),
                (r'"profiler-service:8080"', f'"{service_address}"', 1),
                (r'"dcgm-exporter:9400"', f'"{exporter.address}"', 1),
            ],
        )
    )
    prom_url = f"http://127.0.0.1:{prom_port}"
    processes(
        [
            binary("prometheus"),
            f"--config.file={prom_config}",
            f"--storage.tsdb.path={tmp_path / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            f"--web.external-url=http://127.0.0.1:{prom_port}/",
        ],
        tmp_path / "prometheus.log",
        f"{prom_url}/-/ready",
    )

    def logs() -> str:
        parts = [
            f"--- {p.name}\n{p.read_text()[-2500:]}"
            for p in (tmp_path / "alertmanager.log", service.log)
        ]
        alerts = httpx.get(f"{prom_url}/api/v1/alerts", timeout=5).text[:1500]
        return f"Prometheus alerts: {alerts}\n" + "\n".join(parts)

    client = service.client()
    outcomes = lambda: client.get("/webhooks/alerts").json()["data"]  # noqa: E731

    def alert_state() -> str | None:
        alerts = httpx.get(f"{prom_url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return next(
            (a["state"] for a in alerts if a["labels"]["alertname"] == "TrainingGpuUnderused"),
            None,
        )

    # Healthy for a few scrapes: nothing fires.
    wait_until(
        lambda: httpx.get(
            f"{prom_url}/api/v1/query", params={"query": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
        ).json()["data"]["result"],
        15,
        "Prometheus scraping the stand-in exporter",
    )
    assert outcomes() == []

    # The condition: the pod's GPU idles. The rule fires after its `for` (15 s here): pending until
    # then, and nothing reaches the service meanwhile (a rule without `for` is never pending).
    exporter.value = 0.1
    wait_until(lambda: alert_state() == "pending", 30, "the alert pending in Prometheus", logs)
    assert outcomes() == []
    captured = wait_until(
        lambda: [o for o in outcomes() if o["outcome"] == "captured"],
        60,
        "a captured alert",
        logs,
    )[0]
    assert alert_state() == "firing"
    assert captured["source"] == "alertmanager" and captured["target"] == "trainer"

    snapshot = client.get(f"/profiles/{captured['snapshot_id']}").json()
    trigger = snapshot["trigger"]
    assert trigger["kind"] == "webhook"
    assert trigger["source"] == "alertmanager:TrainingGpuUnderused"
    assert trigger["labels"] == {
        "alertname": "TrainingGpuUnderused",
        "namespace": "ml",
        "pod": "trainer-0",
        "profile": "true",
        "severity": "warning",
    }
    assert trigger["annotations"]["profile_duration"] == "3s"
    assert trigger["annotations"]["summary"].startswith("GPUs of ml/trainer-0 are busy only 10%")
    assert trigger["fingerprint"] == captured["fingerprint"]
    assert trigger["generator_url"].startswith(f"http://127.0.0.1:{prom_port}/graph")
    assert trigger["starts_at"] is not None
    assert snapshot["capture"]["duration_ms"] == 3000

    # Alertmanager sends the still-firing alert again (repeat_interval): within the cooldown.
    again = wait_until(
        lambda: [o for o in outcomes() if o["outcome"] == "deduplicated"],
        30,
        "a deduplicated repeat",
        logs,
    )[0]
    assert again["fingerprint"] == captured["fingerprint"]
    assert again["snapshot_id"] == captured["snapshot_id"]

    # The real capture of the real job finishes and is analysed; Grafana gets its annotation.
    ready = wait_for_status(client, captured["snapshot_id"], {"ready", "failed"}, 180)
    assert ready["status"] == "ready", ready.get("error")
    assert ready["files"] and ready["summary"]
    annotation = wait_until(grafana.annotations, 20, "a Grafana annotation", logs)[0]
    assert "target:trainer" in annotation["tags"]
    assert "alert:TrainingGpuUnderused" in annotation["tags"]
    assert f"/profiles/{captured['snapshot_id']}/report" in annotation["text"]
    assert grafana.problems == []

    # The GPU recovers: the resolved alert is recorded, not captured.
    exporter.value = 0.95
    wait_until(
        lambda: [o for o in outcomes() if o["outcome"] == "resolved"],
        40,
        "a resolved alert",
        logs,
    )
    listed = client.get("/profiles", params={"trigger": "webhook"}).json()
    assert listed["count"] == 1  # one capture for the whole episode

    # Prometheus scraped the outcome counters from the service's own /metrics.
    def scraped() -> float | None:
        result = httpx.get(
            f"{prom_url}/api/v1/query",
            params={"query": 'profiler_webhook_alerts_total{outcome="captured"}'},
        ).json()["data"]["result"]
        return result and float(result[0]["value"][1]) == 1.0

    wait_until(scraped, 15, "profiler_webhook_alerts_total in Prometheus", logs)
