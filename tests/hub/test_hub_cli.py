"""`profiler-service hub` refuses what it cannot serve, with a sentence, before it listens."""

from __future__ import annotations

import os
import subprocess
import sys


def run_hub(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "profiler_service.cli", "hub", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_the_hub_needs_the_fleets_bucket(tmp_path):
    done = run_hub("--store", str(tmp_path / "hub"))
    assert done.returncode == 2
    assert "the hub reads the fleet's bucket: set PROFILER_STORE_URL" in done.stderr


def test_the_hub_refuses_a_public_bind_without_a_token(tmp_path):
    done = run_hub(
        "--store", str(tmp_path / "hub"), "--host", "0.0.0.0",
        "--store-url", f"file://{tmp_path / 'bucket'}",
    )  # fmt: skip
    assert done.returncode == 2 and "without PROFILER_API_TOKEN" in done.stderr


def test_the_hubs_rules_may_name_targets_no_setting_lists(tmp_path, monkeypatch):
    """On a sidecar a rule must name a configured target; the hub's name registered ones."""
    rules = '[{"label": "pod", "pattern": "trainer-.*", "target": "trainer"}]'
    sidecar = subprocess.run(
        [sys.executable, "-m", "profiler_service.cli", "serve", "--store", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PROFILER_WEBHOOK_TARGET_RULES": rules, "PROFILER_PORT": "1"},
    )  # fmt: skip
    assert sidecar.returncode == 2 and "which is not configured" in sidecar.stderr

    from profiler_service.config import HubSettings

    monkeypatch.setenv("PROFILER_WEBHOOK_TARGET_RULES", rules)
    settings = HubSettings()
    assert settings.webhook.target_rules[0].target == "trainer"
