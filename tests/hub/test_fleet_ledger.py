"""The fleet ledger on a fleet built for it: a real Prometheus holding a week of DCGM GPU
utilisation for 24 jobs (written into its TSDB by promtool: gpu_fleet.py), real GPU captures
from tests/fixtures/gpu-captures analysed by XProf and assigned to those jobs as their sidecars'
snapshots in the bucket, and a real `profiler-service hub` over both.

The ledger is held to the series themselves: busy and idle GPU-hours within 1 % of what the
samples say, every idle hour given to a cause or to `no_capture`, the causes of a bucket its
nearest capture's, no capture's causes where none lies within the horizon.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
from gpu_fleet import GpuFleet, GpuSeries, create_blocks, make_fleet
from helpers import ServiceProcess, start_hub, wait_until
from prometheus_client.parser import text_string_to_metric_families

from profiler_service.analysis.gpu_waste import CaptureWaste, capture_waste
from profiler_service.analysis.summary import analyse_run
from profiler_service.config import LedgerSettings
from profiler_service.hub.gpu_hours import queries, query_gpu_hours
from profiler_service.models import CaptureOptions, Snapshot, SnapshotStatus
from profiler_service.store.bucket_client import BucketClient

if TYPE_CHECKING:
    from prometheus_server import Prometheus

pytest_plugins = ["prometheus_server"]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-captures"
CAPTURES = {  # name -> a run of the corpus (its README names the sources)
    "input": FIXTURES / "mholmeslinder-semi-supervised-cv" / "2020_12_21_16_42_56",
    "python": FIXTURES / "jax-h200" / "input_starved_python",
    "launches": FIXTURES / "jax-h200" / "tiny_kernels",
    "copies": FIXTURES / "jax-h200" / "transfers",
}
HORIZON_H = 12
PRICES = "A100=2.9,H100=4.5,*=2"
ADMIN_TOKEN, TEAM_TOKEN = "platform-token-0123456789", "team-01-token-0123456789"
TOKENS = {
    "tokens": [
        {"name": "platform", "token": ADMIN_TOKEN, "read": ["*"]},
        {"name": "team-01", "token": TEAM_TOKEN, "read": ["team-01"]},
    ]
}


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class World:
    fleet: GpuFleet
    prometheus: Prometheus
    hub: ServiceProcess
    wastes: dict[str, CaptureWaste]
    captured: dict[tuple[str, str], list[tuple[float, str]]]  # job -> (time, capture name)
    bucket: Path


def analysed(tmp: Path) -> dict[str, tuple[Snapshot, CaptureWaste]]:
    out = {}
    for name, run in CAPTURES.items():
        copy = tmp / name
        copy.mkdir(parents=True)
        for path in run.glob("*.xplane.pb"):
            shutil.copy(path, copy / path.name)
        result = analyse_run(copy)
        waste = capture_waste(result.summary, result.findings)
        assert waste is not None, name
        out[name] = (result, waste)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory, module_prometheus) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("ledger")
    now = time.time()
    fleet = make_fleet(24, end=now - 120, namespaces=4, seed=11)
    data = create_blocks(fleet, tmp / "prometheus")
    prometheus = module_prometheus({}, data=data)
    results = analysed(tmp / "captures")
    bucket = tmp / "bucket"
    mirror = BucketClient(f"file://{bucket}", {})
    captured: dict[tuple[str, str], list[tuple[float, str]]] = {}
    names = list(CAPTURES)
    i = 0
    for n, ((namespace, job), series) in enumerate(sorted(fleet.jobs().items())):
        if n % 6 == 5:
            continue  # never captured: every idle hour is no_capture
        pods = sorted({s.pod for s in series})
        first, last = series[0].times[0], max(s.times[-1] for s in series)
        # one capture a little after the start, a second near the end for every other job
        moments = [first + (last - first) * 0.2] + ([first + (last - first) * 0.9] if n % 2 else [])
        for k, at in enumerate(moments):
            name = names[(n + k) % len(names)]
            result, _ = results[name]
            created = datetime.fromtimestamp(at, UTC)
            i += 1
            snapshot = Snapshot(
                id=f"{created:%Y%m%d-%H%M%S}-trainer-{i:012x}",
                status=SnapshotStatus.READY,
                target="trainer",
                pod=pods[0] if k == 0 else pods[-1],
                namespace=namespace,
                # every third job's sidecar names no workload: its pod's name says the job
                workload=None if n % 3 == 0 else job,
                capture=CaptureOptions(duration_ms=2000, host_tracer_level=2,
                                       python_tracer_level=0, device_tracer_level=1),
                created_at=created,
                finished_at=created,
                summary=result.summary,
                findings=result.findings,
            )  # fmt: skip
            mirror.write_doc(snapshot)
            captured.setdefault((namespace, job), []).append((at, name))
    tokens = tmp / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    env = {
        "PROFILER_STORE_URL": f"file://{bucket}",
        "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
        "PROFILER_HUB_PROMETHEUS_URL": prometheus.url,
        "PROFILER_HUB_LEDGER_CAPTURE_HORIZON_S": str(HORIZON_H * 3600),
        "PROFILER_HUB_GPU_HOUR_PRICES": PRICES,
        "PROFILER_HUB_LEDGER_METRIC_WINDOW_S": str(7 * 86400),
        "PROFILER_HUB_LEDGER_REFRESH_S": "1",
        "PROFILER_TOKENS_FILE": str(tokens),
    }
    hub = start_hub(tmp / "hub", env)
    try:
        wait_until(
            lambda: (
                httpx.get(f"{hub.url}/profiles", headers=ADMIN, params={"limit": 1}).json()["count"]
                == i
            ),
            what="the hub to index every snapshot",
        )
        yield World(fleet, prometheus, hub, {k: v[1] for k, v in results.items()}, captured,
                    bucket)  # fmt: skip
    finally:
        hub.stop()


def ledger(world: World, window: str = "7d", headers: dict | None = None) -> dict:
    response = httpx.get(
        f"{world.hub.url}/fleet/ledger",
        params={"window": window},
        headers=headers or ADMIN,
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_every_job_s_hours_match_its_series_and_every_idle_hour_has_a_cause(world):
    body = ledger(world)
    assert body["source"] == "prometheus", body["notes"]
    start, end = body["start"], body["end"]
    assert end - start == 7 * 86400
    jobs = {(j["namespace"], j["job"]): j for j in body["jobs"]}
    truth = world.fleet.jobs()
    present = {k for k, s in truth.items() if any(((x.times > start) & (x.times <= end)).any()
                                                  for x in s)}  # fmt: skip
    assert set(jobs) == present
    for key, series in truth.items():
        if key not in jobs:
            continue
        job = jobs[key]
        held = sum(s.held_s(start, end) for s in series) / 3600
        busy = sum(s.busy_s(start, end) for s in series) / 3600
        assert job["gpu_hours"] == pytest.approx(held, rel=0.01), key
        assert job["busy_gpu_hours"] == pytest.approx(busy, rel=0.01), key
        assert job["idle_gpu_hours"] == pytest.approx(held - busy, rel=0.01, abs=0.05), key
        assert sum(job["idle_by_cause"].values()) == pytest.approx(job["idle_gpu_hours"], 1e-6)
        assert job["gpus"] == len({(s.pod, s.gpu) for s in series if s.pod == series[0].pod})
        assert job["gpu_model"] == series[0].model
        # The job's pods, a restart's included, whether its snapshots named its workload or not.
        assert job["pods"] == sorted({s.pod for s in series})
        used = {world.wastes[name].model_dump_json() for _, name in world.captured.get(key, [])}
        causes = set(job["idle_by_cause"]) - {"no_capture"}
        allowed = {c for w in used for c in json.loads(w)["idle_by_cause"]}
        assert causes <= allowed, (key, causes, allowed)
        if key not in world.captured:
            assert set(job["idle_by_cause"]) == {"no_capture"}, key
            assert job["recoverable_gpu_hours"] == 0 and job["top_finding"] is None
    totals = body["totals"]
    assert totals["gpu_hours"] == pytest.approx(sum(j["gpu_hours"] for j in body["jobs"]))
    for cause, hours in totals["idle_by_cause"].items():
        assert hours == pytest.approx(sum(j["idle_by_cause"].get(cause, 0) for j in body["jobs"]))
    assert sum(totals["idle_by_cause"].values()) == pytest.approx(totals["idle_gpu_hours"], 1e-6)
    for ns in body["namespaces"]:
        mine = [j for j in body["jobs"] if j["namespace"] == ns["namespace"]]
        assert ns["jobs"] == len(mine)
        assert ns["gpu_hours"] == pytest.approx(sum(j["gpu_hours"] for j in mine))
        assert ns["recoverable_gpu_hours"] == pytest.approx(
            sum(j["recoverable_gpu_hours"] for j in mine)
        )
    recoverable = [j["recoverable_gpu_hours"] for j in body["jobs"]]
    assert recoverable == sorted(recoverable, reverse=True)


def test_a_bucket_takes_its_nearest_capture_s_causes_and_savings(world):
    """One captured job, recomputed from its series: the buckets within the horizon of its one
    capture split their idle hours by that capture's causes; the others are no_capture."""
    body = ledger(world)
    start, end = body["start"], body["end"]
    jobs = {(j["namespace"], j["job"]): j for j in body["jobs"]}
    bucket = 3600
    checked = 0
    for key, moments in world.captured.items():
        if len(moments) != 1 or key not in jobs:
            continue
        ((at, name),) = moments
        waste = world.wastes[name]
        near_idle = far_idle = near_held = 0.0
        for s in world.fleet.jobs()[key]:
            for b in range(int(start) + bucket, int(end) + 1, bucket):
                inside = (s.times > b - bucket) & (s.times <= b)
                held = inside.sum() * s.interval_s
                idle = held - s.util[inside].sum() / 100 * s.interval_s
                if abs(b - bucket / 2 - at) <= HORIZON_H * 3600:
                    near_idle, near_held = near_idle + idle, near_held + held
                else:
                    far_idle += idle
        job = jobs[key]
        got = job["idle_by_cause"]

        assert got.get("no_capture", 0) == pytest.approx(far_idle / 3600, rel=0.01, abs=0.05)
        for cause, share in waste.idle_by_cause.items():
            whole = sum(waste.idle_by_cause.values())
            assert got.get(cause, 0) == pytest.approx(
                near_idle / 3600 * share / whole, rel=0.01, abs=0.05
            ), (key, cause)
        assert job["recoverable_gpu_hours"] == pytest.approx(
            near_held / 3600 * waste.saving_share, rel=0.01, abs=0.05
        )
        least, most = job["recoverable_gpu_hours_range"]  # each fix's range, over the hours
        low, high = waste.saving_bounds
        assert least == pytest.approx(near_held / 3600 * low, rel=0.01, abs=0.05)
        assert most == pytest.approx(near_held / 3600 * high, rel=0.01, abs=0.05)
        assert least <= job["recoverable_gpu_hours"] <= most
        top = job["top_finding"]
        assert top["rule"] == waste.rule and top["link"].endswith(
            f"/profiles/{top['snapshot_id']}/report"
        )
        checked += 1
    assert checked >= 5


def test_prices_by_gpu_model(world):
    body = ledger(world)
    prices = {"A100": 2.9, "H100": 4.5}
    for job in body["jobs"]:
        price = next((p for k, p in prices.items() if k in job["gpu_model"]), 2.0)
        assert job["price_per_gpu_hour"] == price
        assert job["cost"] == pytest.approx(job["gpu_hours"] * price)
        assert job["recoverable_cost"] == pytest.approx(job["recoverable_gpu_hours"] * price)
        low, high = job["recoverable_gpu_hours_range"]
        assert job["recoverable_cost_range"] == pytest.approx([low * price, high * price])
    totals = body["totals"]
    assert totals["recoverable_cost_range"] == pytest.approx(
        [sum(j["recoverable_cost_range"][k] for j in body["jobs"]) for k in (0, 1)]
    )  # summed as such


def test_a_team_s_token_sees_its_namespace_only(world):
    body = ledger(world, headers={"Authorization": f"Bearer {TEAM_TOKEN}"})
    assert body["jobs"] and {j["namespace"] for j in body["jobs"]} == {"team-01"}
    assert [n["namespace"] for n in body["namespaces"]] == ["team-01"]
    everyone = ledger(world)
    team = next(n for n in everyone["namespaces"] if n["namespace"] == "team-01")
    assert body["totals"]["gpu_hours"] == pytest.approx(team["gpu_hours"])


def test_the_metric_the_page_and_the_command_line_show_the_ledger(world):
    body = ledger(world)
    job = body["jobs"][0]

    def scraped() -> dict[tuple[str, str], float]:
        """(state, cause) -> GPU-hours of `job`."""
        text = httpx.get(f"{world.hub.url}/metrics", headers=ADMIN).text
        return {
            (s.labels["state"], s.labels["cause"]): s.value
            for family in text_string_to_metric_families(text)
            if family.name == "profiler_fleet_gpu_hours"
            for s in family.samples
            if (s.labels["namespace"], s.labels["workload"]) == (job["namespace"], job["job"])
        }

    samples = wait_until(scraped, what="the ledger's metric")
    assert samples[("held", "")] == pytest.approx(job["gpu_hours"], rel=0.01)
    assert samples[("recoverable", "")] == pytest.approx(job["recoverable_gpu_hours"], rel=0.01)
    low, high = job["recoverable_gpu_hours_range"]  # the range, summed as such
    assert samples[("recoverable_low", "")] == pytest.approx(low, rel=0.01)
    assert samples[("recoverable_high", "")] == pytest.approx(high, rel=0.01)
    idle = {cause: v for (state, cause), v in samples.items() if state == "idle"}
    assert idle.keys() == job["idle_by_cause"].keys()
    assert sum(idle.values()) == pytest.approx(job["idle_gpu_hours"], rel=0.01)

    page = httpx.get(f"{world.hub.url}/fleet", headers=ADMIN).text
    assert 'id="idle-by-cause"' in page and 'data-cause="no_capture"' in page
    assert f'data-job="{job["namespace"]}/{job["job"]}"' in page

    out = subprocess.run(
        [sys.executable, "-m", "profiler_service.cli", "ledger", "--hub", world.hub.url,
         "--window", "7d", "--token", TEAM_TOKEN],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "GPU-hours over 7d (prometheus)" in out
    assert "team-01" in out and "team-02" not in out


def test_a_window_not_understood_is_a_clear_error(world):
    response = httpx.get(f"{world.hub.url}/fleet/ledger", params={"window": "7x"}, headers=ADMIN)
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_duration" and "7d" in body["detail"], body


def test_without_prometheus_the_ledger_is_the_captures_shares_and_says_so(world, tmp_path):
    hub = start_hub(
        tmp_path / "hub",
        {"PROFILER_STORE_URL": f"file://{world.bucket}", "PROFILER_HUB_SYNC_INTERVAL_S": "0.5"},
    )
    try:
        wait_until(
            lambda: httpx.get(f"{hub.url}/profiles", params={"limit": 1}).json()["count"] > 0,
            what="the hub's first sync",
        )
        body = httpx.get(f"{hub.url}/fleet/ledger", params={"window": "7d"}, timeout=60).json()
    finally:
        hub.stop()
    assert body["source"] == "captures"
    assert any("no Prometheus is configured" in note for note in body["notes"])
    assert body["jobs"] and all(j["gpu_hours"] is None for j in body["jobs"])
    for job in body["jobs"]:
        assert 0 < job["idle_share"] <= 1
        assert sum(job["idle_share_by_cause"].values()) == pytest.approx(job["idle_share"], 1e-3)


def test_every_way_of_counting_held_hours_agrees_with_the_series(world):
    """Samples x the interval the samples show (the default here: every series is scraped every
    30 s), x the interval set in `hub_gpu_scrape_interval_s`, and the presence intervals (what
    a fleet with several scrape intervals gets): all three match the series to 1 %."""
    end = int(time.time() // 60 * 60)
    start = end - 2 * 86400
    truth_held = sum(s.held_s(start, end) for s in world.fleet.series)
    truth_busy = sum(s.busy_s(start, end) for s in world.fleet.series)
    url = world.prometheus.url
    ways = {
        "shown": (LedgerSettings(hub_prometheus_url=url), False),
        "set": (LedgerSettings(hub_prometheus_url=url, hub_gpu_scrape_interval_s=30), False),
        "presence": (LedgerSettings(hub_prometheus_url=url), True),
    }
    methods = {}
    for name, (settings, presence) in ways.items():
        counted = query_gpu_hours(settings, start, end, 3600, presence=presence)
        methods[name] = counted.method
        held = sum(sum(p.held_s.values()) for p in counted.pods)
        busy = sum(sum(p.busy_s.values()) for p in counted.pods)
        assert held == pytest.approx(truth_held, rel=0.01), name
        assert busy == pytest.approx(truth_busy, rel=0.01), name
    assert "the scrape interval every GPU series showed" in methods["shown"]
    assert "30 s" in methods["shown"] and "hub_gpu_scrape_interval_s" in methods["set"]
    assert "intervals holding a sample" in methods["presence"]
    assert "present_over_time" not in " ".join(queries(ways["shown"][0], 3600).values())


def test_a_fleet_scraped_at_two_intervals_counts_each_pods_samples_at_its_own(
    tmp_path, prometheus
):
    """A third of the jobs scraped every 60 s, the rest every 30 s, and two pods of 50 minutes
    (too brief to show their interval): no one interval counts every pod's samples, so each
    pod's samples count at its own, and the brief pods' GPUs by the 60 s intervals holding one
    of their samples (the presence subquery, narrowed to them); the hours match the series."""
    end = time.time() - 120
    fleet = make_fleet(9, end=end, days=2, namespaces=3, seed=5, other_interval_s=60)
    assert {s.interval_s for s in fleet.series} == {30, 60}
    for k, every in enumerate((30, 60)):  # 50 minutes, ending two hours before the end
        first = (end - 3 * 3600) // every * every
        times = np.arange(first, first + 3000, every, dtype=np.int64)
        util = np.full(len(times), 40 + 20 * k, dtype=np.int64)
        fleet.series.append(GpuSeries("team-00", f"brief.{k}-q7x2z", "brief", 0, "NVIDIA A100",
                                      times, util, every))  # fmt: skip
    server = prometheus({}, data=create_blocks(fleet, tmp_path / "prometheus"))
    settings = LedgerSettings(hub_prometheus_url=server.url)
    stop = int(time.time() // 60 * 60)
    start = stop - 2 * 86400
    counted = query_gpu_hours(settings, start, stop, 3600)
    assert "each pod's own scrape interval" in counted.method and "differ" in counted.method
    assert "pods seen in fewer than 3 buckets: 60 s intervals holding a sample" in counted.method
    held = sum(sum(p.held_s.values()) for p in counted.pods)
    busy = sum(sum(p.busy_s.values()) for p in counted.pods)
    assert held == pytest.approx(sum(s.held_s(start, stop) for s in fleet.series), rel=0.01)
    assert busy == pytest.approx(sum(s.busy_s(start, stop) for s in fleet.series), rel=0.01)
    for k in range(2):  # the brief pods' own hours, to a minute or two
        (pod,) = [p for p in counted.pods if p.pod == f"brief.{k}-q7x2z"]
        (series,) = [s for s in fleet.series if s.pod == pod.pod]
        assert sum(pod.held_s.values()) == pytest.approx(series.held_s(start, stop), abs=120)
