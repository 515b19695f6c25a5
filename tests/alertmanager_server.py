"""A real Alertmanager on loopback with deploy/alertmanager/alertmanager.yml, and alerts fired
into it as Prometheus would: what the end-to-end alert tests share.

Alertmanager and Prometheus come from the Debian packages `prometheus-alertmanager` and
`prometheus` (scripts/install-system-packages).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from helpers import free_port, wait_for_http

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ALERTMANAGER_YML = DEPLOY / "alertmanager" / "alertmanager.yml"


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is missing: run scripts/install-system-packages as root "
            "(Debian packages prometheus, prometheus-alertmanager)",
            pytrace=False,
        )
    return found


def templated(text: str, replacements: list[tuple[str, str, int]]) -> str:
    """Apply regex replacements, each of which must match exactly `count` times."""
    for pattern, new, count in replacements:
        text, n = re.subn(pattern, new, text, flags=re.MULTILINE)
        assert n == count, f"{pattern!r} matched {n} times in a deploy file, expected {count}"
    return text


def start_alertmanager(
    folder: Path,
    receiver_url: str,
    token: str,
    processes: list,
    repeat_interval: str | None = None,
) -> str:
    """The deploy routing with `receiver_url` (the hub's or a sidecar's) as the webhook, `token`
    in its credentials file and 1 s group intervals (and `repeat_interval`, after which a
    still-firing alert is sent again); its process is appended to `processes`. Returns its URL
    once it is ready."""
    repeat = [(r"repeat_interval: \S+$", f"repeat_interval: {repeat_interval}", 2)]
    token_file = folder / "webhook-token"
    token_file.write_text(token)
    config = folder / "alertmanager.yml"
    config.write_text(
        templated(
            ALERTMANAGER_YML.read_text(),
            [
                (r"http://fleet-profiler-hub\.ml\.svc:8080/", f"{receiver_url}/", 1),
                (r"credentials_file: .*$", f"credentials_file: {token_file}", 1),
                (r"group_wait: \S+$", "group_wait: 1s", 2),
                (r"group_interval: \S+$", "group_interval: 1s", 2),
                *(repeat if repeat_interval else []),
            ],
        )
    )
    port = free_port()
    log = folder / "alertmanager.log"
    proc = subprocess.Popen(
        [binary("prometheus-alertmanager"), f"--config.file={config}",
         f"--storage.path={folder / 'am-data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address="],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    processes.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_for_http(proc, f"{url}/-/ready", log, "alertmanager", timeout_s=30)
    return url


def fire(am_url: str, **labels: str) -> None:
    """What Prometheus would send: one firing alert, labelled for the profiler route."""
    now = datetime.now(UTC)
    alert = {
        "labels": {"alertname": "TrainingGpuUnderused", "profile": "true",
                   "severity": "warning", **labels},
        "annotations": {"profile_duration": "1s"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=10)).isoformat(),
        "generatorURL": "http://prometheus.example/graph",
    }  # fmt: skip
    httpx.post(f"{am_url}/api/v2/alerts", json=[alert], timeout=10).raise_for_status()
