"""A fleet behind one hub: three real training jobs, three real sidecars, one real S3 API on
loopback (moto), a real Alertmanager posting to the hub with deploy/alertmanager/alertmanager.yml.

The three sidecars capture a target of the same name (`trainer`, what the Helm chart names every
job's), in three namespaces: only the alert's pod and namespace tell them apart, and each
snapshot names its job by its workload (PROFILER_WORKLOAD, the chart's release). An alert for one
captures that job and no other; the snapshot reaches the bucket and the hub's fleet listing. Then
a sidecar is killed: an alert for it is `sidecar_unreachable` until the TTL, `no_sidecar` after,
and an alert for another sidecar meanwhile is captured as usual.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from alertmanager_server import fire, start_alertmanager
from helpers import free_port, start_hub, start_job, wait_for_status
from s3_server import S3Server, wait_until

BUCKET = "fleet"
HUB_TOKEN = "fleet-hub-token"
WEBHOOK_TOKEN = "am-webhook-token"
SIDECAR_WEBHOOK_TOKEN = "sidecar-only"
TTL_S = 6
TTL = timedelta(seconds=TTL_S)


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    server = S3Server(free_port()).start(tmp_path_factory.mktemp("moto") / "moto.log")
    server.create_bucket(BUCKET)
    yield server
    server.stop()


@pytest.fixture
def third_job():
    job = start_job("--workload", "memory", "--step-ms", "40", "--profiler-port",
                    str(free_port()), "--seconds", "900")  # fmt: skip
    yield job
    job.stop()


def test_an_alert_through_the_hub_captures_the_right_job_only(
    tmp_path, s3, input_bound_job, compute_bound_job, third_job, service_factory
):
    store_env = {
        "PROFILER_STORE_URL": f"s3://{BUCKET}/fleet",
        "PROFILER_STORE_OPTIONS": json.dumps(s3.options),
        "PROFILER_STORE_RETRY_MAX_S": "1",
    }
    hub = start_hub(
        tmp_path / "hub",
        {
            **store_env,
            "PROFILER_HUB_TOKEN": HUB_TOKEN,
            "PROFILER_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "PROFILER_HUB_SIDECAR_TTL_S": str(TTL_S),
            "PROFILER_HUB_SYNC_INTERVAL_S": "1",
        },
    )
    processes: list = []
    try:
        run_fleet(tmp_path, s3, hub, store_env, processes, service_factory,
                  [input_bound_job, compute_bound_job, third_job])  # fmt: skip
    finally:
        from helpers import stop_process

        for proc in processes:
            stop_process(proc, timeout_s=15)
        hub.stop()


def run_fleet(tmp_path, s3, hub, store_env, processes, service_factory, jobs) -> None:
    names = ("a", "b", "c")
    sidecars = {}
    for name, job in zip(names, jobs, strict=True):
        sidecars[name] = service_factory(
            [f"trainer={job.address}"],
            {
                **store_env,
                "PROFILER_HUB_URL": hub.url,
                "PROFILER_HUB_TOKEN": HUB_TOKEN,
                "PROFILER_HUB_HEARTBEAT_S": "1",
                "PROFILER_POD_NAME": f"trainer-{name}-0",
                "PROFILER_POD_NAMESPACE": f"ml-{name}",
                "PROFILER_WORKLOAD": f"job-{name}",  # what the chart sets: the release's name
                "PROFILER_WEBHOOK_TOKEN": SIDECAR_WEBHOOK_TOKEN,
                "PROFILER_WEBHOOK_MIN_INTERVAL_S": "0",
            },
            store=tmp_path / f"sidecar-{name}",
        )
    client = hub.client()
    wait_until(lambda: client.get("/sidecars").json()["count"] == 3, 30, "three registrations")
    am_url = start_alertmanager(tmp_path, hub.url, WEBHOOK_TOKEN, processes)

    def routed(pod: str) -> list[dict]:
        return [o for o in client.get("/webhooks/alerts").json()["data"]
                if o["labels"].get("pod") == pod]  # fmt: skip

    # One alert, for ml-b/trainer-b-0: the hub routes it to sidecar b, which captures job b.
    fire(am_url, namespace="ml-b", pod="trainer-b-0")
    outcome = wait_until(lambda: routed("trainer-b-0"), 60, "the hub routing the alert")[0]
    assert outcome["outcome"] == "captured", outcome
    assert outcome["sidecar"] == "ml-b/trainer-b-0" and outcome["target"] == "trainer"
    with sidecars["b"].client() as b:
        snapshot = wait_for_status(b, outcome["snapshot_id"], {"ready", "failed"}, 180)
    assert snapshot["status"] == "ready", snapshot.get("error")
    assert snapshot["namespace"] == "ml-b" and snapshot["pod"] == "trainer-b-0"
    assert snapshot["workload"] == "job-b"
    assert snapshot["trigger"]["labels"]["pod"] == "trainer-b-0"
    assert snapshot["workers"] == [jobs[1].address.removeprefix("grpc://")]
    for other in ("a", "c"):
        with sidecars[other].client() as c:
            assert c.get("/webhooks/alerts").json()["data"] == []
            assert c.get("/profiles", params={"namespace": f"ml-{other}"}).json()["count"] == 0

    # It reaches the bucket, and the hub's fleet listing, report and page.
    listed = wait_until(
        lambda: client.get("/profiles", params={"namespace": "ml-b"}).json()["data"], 90,
        "the snapshot in the fleet listing",
    )  # fmt: skip
    assert [s["id"] for s in listed] == [snapshot["id"]]
    assert client.get("/profiles", params={"namespace": "ml-a"}).json()["count"] == 0
    assert client.get(f"/profiles/{snapshot['id']}/report").status_code == 200
    name = snapshot["files"][0]["name"]
    download = client.get(f"/profiles/{snapshot['id']}/files/{name}")
    local = tmp_path / "sidecar-b" / "plugins" / "profile" / snapshot["id"] / name
    assert download.status_code == 200 and download.content == local.read_bytes()
    assert 'data-job="ml-b/job-b/trainer"' in client.get("/fleet").text
    assert client.get("/profiles", params={"workload": "job-b"}).json()["count"] == 1

    # Sidecar c is killed. An alert for it is unreachable while the hub still lists it (its
    # last heartbeat within the TTL, by the hub's own times), no sidecar after;
    # an alert for sidecar a at the same time is captured as usual.
    sidecars["c"].proc.send_signal(signal.SIGKILL)
    sidecars["c"].proc.wait()
    last_seen = next(
        (datetime.fromisoformat(s["last_seen"]) for s in client.get("/sidecars").json()["data"]
         if s["name"] == "trainer-c-0"),
        None,
    )  # fmt: skip
    fire(am_url, namespace="ml-c", pod="trainer-c-0")
    fire(am_url, namespace="ml-a", pod="trainer-a-0")
    lost = wait_until(lambda: routed("trainer-c-0"), 60, "the alert for the killed sidecar")[0]
    assert lost["outcome"] in {"sidecar_unreachable", "no_sidecar"}, lost
    if last_seen is not None and datetime.fromisoformat(lost["at"]) - last_seen < TTL:
        assert lost["outcome"] == "sidecar_unreachable", (lost, last_seen)  # listed: dialled
    kept = wait_until(lambda: routed("trainer-a-0"), 60, "the alert for sidecar a")[0]
    assert kept["outcome"] == "captured" and kept["sidecar"] == "ml-a/trainer-a-0", kept
    with sidecars["a"].client() as a:
        done = wait_for_status(a, kept["snapshot_id"], {"ready", "failed"}, 180)
    assert done["status"] == "ready", done.get("error")
    wait_until(
        lambda: (
            [s["name"] for s in client.get("/sidecars").json()["data"]]
            == ["trainer-a-0", "trainer-b-0"]
        ),
        TTL_S + 10,
        "the killed sidecar dropping out",
    )
    # Past the TTL the hub no longer knows it: it never dials the dead address again.
    direct = client.post(
        "/webhooks/alertmanager",
        json={"version": "4", "alerts": [{"status": "firing", "labels": {
            "alertname": "Direct", "namespace": "ml-c", "pod": "trainer-c-0"}}]},
        headers={"Authorization": f"Bearer {WEBHOOK_TOKEN}"},
    ).json()["alerts"][0]  # fmt: skip
    assert direct["outcome"] == "no_sidecar" and direct["reason"] == "no_matching_sidecar"
    client.close()
