"""Comparisons and the CI gate on real captures: same job twice, and a deliberately slower one.

The slower job does counted extra work, four times the records a step decoded alike, so its step
time is about 4x whatever the load; the same job twice is asked to stay within 50 %, a band
that a second process burning a core does not cross between two captures.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from helpers import QUIET_TF, free_port, start_job


@pytest.fixture(scope="module")
def slow_job():
    """The input-bound job reading 4x the records a step (a regression to catch)."""
    job = start_job(
        "--workload", "input-bound", "--batch-size", "128", "--profiler-port", str(free_port())
    )
    yield job
    job.stop()


def gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "profiler_service.cli", "compare", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **QUIET_TF},
    )


def test_same_job_twice_is_no_regression_and_a_slower_reader_is(
    input_bound_job, slow_job, service_factory
):
    service = service_factory([f"fast={input_bound_job.address}", f"slow={slow_job.address}"])
    with service.client() as client:

        def capture(target: str) -> dict:
            body = client.post(
                "/profile", params={"duration": "2s", "wait": "true", "target": target}
            ).json()
            assert body["status"] == "ready", body.get("error")
            return body

        first, second, slow = capture("fast"), capture("fast"), capture("slow")

        same = client.get(
            f"/profiles/{second['id']}/compare",
            params={"baseline": first["id"], "max_regression": "50%"},
        ).json()
        assert (
            0.67 < same["metrics"]["step_time"]["head"] / same["metrics"]["step_time"]["base"] < 1.5
        )
        assert same["regressed"]["step_time"] is False

        worse = client.get(
            f"/profiles/{slow['id']}/compare", params={"baseline": first["id"]}
        ).json()
        ratio = worse["metrics"]["step_time"]["head"] / worse["metrics"]["step_time"]["base"]
        assert ratio > 2.5  # 4x the records; the step is mostly waiting on them
        assert worse["regressed"]["step_time"] is True
        assert worse["max_regression"] == pytest.approx(0.10)
        # The time went to input, which is where the slower reader is.
        input_ms = worse["step_breakdown_ms"]["input_ms"]
        assert input_ms["head"] > 2.5 * input_ms["base"]
        assert "different targets: fast vs slow" in worse["notes"]

        better = client.get(
            f"/profiles/{first['id']}/compare", params={"baseline": slow["id"]}
        ).json()
        assert better["regressed"]["step_time"] is False
        assert better["metrics"]["step_time"]["head"] < better["metrics"]["step_time"]["base"]

    store = service.store / "plugins" / "profile"
    ok = gate(str(store / first["id"]), str(store / second["id"]), "--max-regression", "50%")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ok: step_time" in ok.stdout
    bad = gate(first["id"], slow["id"], "--url", service.url, "--max-regression", "10%")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "REGRESSION: step_time" in bad.stdout
    assert "step_time" in bad.stdout.splitlines()[2] and bad.stdout.splitlines()[2].endswith("<-")


def test_baseline_of_a_target_is_used_by_default_and_exported(input_bound_job, service_factory):
    service = service_factory([f"trainer={input_bound_job.address}"], {"PROFILER_API_TOKEN": "t"})
    auth = {"Authorization": "Bearer t"}
    with service.client(headers=auth) as client:
        base = client.post(
            "/profile", params={"duration": "1s", "wait": "true", "label": "model_version=v1"}
        ).json()
        assert base["trigger"]["labels"] == {"model_version": "v1"}
        no_baseline = client.get(f"/profiles/{base['id']}/compare")
        assert no_baseline.status_code == 404 and no_baseline.json()["error"] == "no_baseline"

        pinned = client.put(f"/profiles/{base['id']}/baseline")
        assert pinned.status_code == 200
        assert pinned.json()["key"] == "target:trainer" and pinned.json()["snapshot"]["pinned"]
        assert client.get("/baselines").json() == {"target:trainer": base["id"]}

        head = client.post("/profile", params={"duration": "1s", "wait": "true"}).json()
        comparison = client.get(f"/profiles/{head['id']}/compare").json()
        assert comparison["base_id"] == base["id"] and comparison["head_id"] == head["id"]

        report = client.get(f"/profiles/{head['id']}/report", params={"baseline": base["id"]})
        assert report.status_code == 200 and f"Compared with {base['id']}" in report.text

        metrics = httpx.get(f"{service.url}/metrics").text
        line = next(
            ln
            for ln in metrics.splitlines()
            if ln.startswith("profiler_latest_step_time_regression_ratio{")
        )
        assert f'baseline="{base["id"]}"' in line and 'target="trainer"' in line
        ratio = float(line.rsplit(" ", 1)[1])
        expected = head["summary"]["step_time"]["avg_ms"] / base["summary"]["step_time"]["avg_ms"]
        assert ratio == pytest.approx(expected, rel=1e-6)

        bad_label = client.put(f"/profiles/{base['id']}/baseline", params={"label": "no-equals"})
        assert bad_label.status_code == 422 and bad_label.json()["error"] == "invalid_request"


def test_gate_cannot_judge_a_snapshot_without_analysis(service_factory, tmp_path):
    service = service_factory([f"grpc://127.0.0.1:{free_port()}"])
    with service.client() as client:
        failed = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
    assert failed["status"] == "failed"
    result = gate(failed["id"], failed["id"], "--store", str(service.store))
    assert result.returncode == 2
    assert "cannot gate" in result.stderr
