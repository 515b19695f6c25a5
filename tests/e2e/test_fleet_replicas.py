"""Two hub replicas behind one address, one of them killed in the middle of a burst of alerts.

Real processes throughout: a real S3 API (moto), two `profiler-service hub` replicas, three
sidecars, a real Alertmanager with deploy/alertmanager/alertmanager.yml. A loopback proxy
(tests/tcp_proxy.py) stands in for the hub's Service: Alertmanager posts to it and the sidecars
heartbeat through it, and it sends everything to replica 0 while it lives, so replica 1 knows the
sidecars only from the bucket (hub/peers.py). The sidecars' targets listen nowhere: each capture
starts (the outcome under test) and fails at once, with no training job to load the machine.

Sidecar a answers the hub through a proxy that holds each answer 3 s. The first alert for it is
captured there while replica 0 waits for that answer, and replica 0 is SIGKILLed then: the
alert's delivery fails, Alertmanager retries through the address, replica 1 forwards it again,
and sidecar a answers `deduplicated` (the alert's fingerprint was captured): one capture. Every
other alert of the burst, before and after the kill, gets an outcome at the sidecar it names and
at most one capture; the survivor lists every sidecar and the whole fleet's snapshots.
"""

from __future__ import annotations

import json
import signal
from collections import Counter

from alertmanager_server import fire, start_alertmanager
from helpers import free_port, start_hub, stop_process
from s3_server import wait_until
from tcp_proxy import ServiceProxy
from test_fleet import BUCKET, s3  # noqa: F401 (s3: the fixture)

HUB_TOKEN = "replicas-hub-token"
WEBHOOK_TOKEN = "am-webhook-token"
PODS = [("ml-a", "trainer-a-0"), ("ml-b", "trainer-b-0"), ("ml-c", "trainer-c-0")]
BEFORE, AFTER = 6, 6  # alerts fired before and after the kill
REPLY_DELAY_S = 3.0  # sidecar a answers this late (the fault: replica 0 is killed meanwhile)


def test_a_replica_killed_mid_burst_loses_no_alert_and_captures_none_twice(
    tmp_path,
    s3,  # noqa: F811
    service_factory,
):
    store_env = {
        "PROFILER_STORE_URL": f"s3://{BUCKET}/replicas",
        "PROFILER_STORE_OPTIONS": json.dumps(s3.options),
        "PROFILER_STORE_RETRY_MAX_S": "1",
    }
    hub_env = {
        **store_env,
        "PROFILER_HUB_TOKEN": HUB_TOKEN,
        "PROFILER_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
        "PROFILER_HUB_SIDECAR_TTL_S": "20",
        "PROFILER_HUB_SYNC_INTERVAL_S": "1",
    }
    ports = [free_port(), free_port()]
    hubs = [start_hub(tmp_path / f"hub-{i}", hub_env, port) for i, port in enumerate(ports)]
    service = ServiceProxy(ports, policy="first_alive").start()
    slow_a = ServiceProxy([0], reply_delay_s=REPLY_DELAY_S).start()  # its backend: below
    processes: list = []
    clients = [hub.client() for hub in hubs]
    try:
        sidecars = {}
        for namespace, pod in PODS:
            sidecars[pod] = service_factory(
                ["trainer=grpc://127.0.0.1:1"],
                {
                    **store_env,
                    "PROFILER_HUB_URL": service.url,
                    "PROFILER_HUB_TOKEN": HUB_TOKEN,
                    "PROFILER_HUB_HEARTBEAT_S": "1",
                    "PROFILER_POD_NAME": pod,
                    "PROFILER_POD_NAMESPACE": namespace,
                    "PROFILER_WEBHOOK_MIN_INTERVAL_S": "0",
                    "PROFILER_LOOKBACK_S": "0",
                    **({"PROFILER_HUB_ADVERTISE_URL": slow_a.url} if pod == "trainer-a-0" else {}),
                },
                store=tmp_path / pod,
            )
        slow_a.backends[0] = int(sidecars["trainer-a-0"].url.rpartition(":")[2])
        # Every heartbeat reached replica 0; replica 1 knows them all from the bucket.
        for client, via in ((clients[0], "hub"), (clients[1], "peer")):
            wait_until(
                lambda c=client, v=via: [s["via"] for s in c.get("/sidecars").json()["data"]]
                == [v] * 3,
                30,
                f"three sidecars ({via})",
            )  # fmt: skip
        am_url = start_alertmanager(tmp_path, service.url, WEBHOOK_TOKEN, processes)

        def fire_burst(numbers: range) -> None:
            for i in numbers:  # one Alertmanager group (and fingerprint) per alert name
                namespace, pod = PODS[i % len(PODS)]
                fire(am_url, namespace=namespace, pod=pod, alertname=f"Burst{i:02d}")

        def outcomes_at(pod: str) -> list[dict]:
            with sidecars[pod].client() as c:
                return c.get("/webhooks/alerts").json()["data"]

        fire_burst(range(BEFORE))
        # Burst00 is captured by sidecar a, whose answer replica 0 still awaits: kill it now.
        wait_until(lambda: outcomes_at("trainer-a-0"), 60, "sidecar a deciding the first alert")
        hubs[0].proc.send_signal(signal.SIGKILL)
        hubs[0].proc.wait()
        fire_burst(range(BEFORE, BEFORE + AFTER))

        # Every alert got an outcome at the sidecar it names, and none was captured twice.
        def by_alert() -> dict[str, list[dict]]:
            seen: dict[str, list[dict]] = {}
            for _, pod in PODS:
                for o in outcomes_at(pod):
                    seen.setdefault(o["labels"]["alertname"], []).append(o)
            return seen

        wait_until(lambda: len(by_alert()) == BEFORE + AFTER, 120, "an outcome for every alert")
        seen = by_alert()
        for name, its in seen.items():
            _, pod = PODS[int(name.removeprefix("Burst")) % len(PODS)]
            assert {o["labels"]["pod"] for o in its} == {pod}, its
            kinds = Counter(o["outcome"] for o in its)
            assert kinds["captured"] <= 1, f"{name} was captured {kinds['captured']} times: {its}"
            assert set(kinds) <= {"captured", "deduplicated", "skipped_busy"}, its
        # The alert replica 0 died on was delivered again and deduplicated, not captured again.
        retried = wait_until(
            lambda: sorted(o["outcome"] for o in by_alert()["Burst00"])
            == ["captured", "deduplicated"],
            60,
            "Alertmanager's retry of the alert in flight",
        )  # fmt: skip
        assert retried
        for pod, sidecar in sidecars.items():  # one snapshot per alert at most
            with sidecar.client() as c:
                data = c.get("/profiles", params={"limit": 500}).json()["data"]
            taken = Counter(s["trigger"]["labels"]["alertname"] for s in data)
            assert all(n == 1 for n in taken.values()), (pod, taken)
        survivor = clients[1]
        # It records an outcome once the sidecar answers (sidecar a's answers come 3 s late).
        expected = {"Burst00"} | {f"Burst{i:02d}" for i in range(BEFORE, BEFORE + AFTER)}
        wait_until(
            lambda: expected
            <= {o["labels"]["alertname"] for o in survivor.get("/webhooks/alerts").json()["data"]},
            30,
            "the survivor's outcomes",
        )  # fmt: skip

        # The survivor routes to every sidecar, and lists the whole fleet's snapshots.
        assert survivor.get("/sidecars").json()["count"] == 3
        captured = sum(1 for its in seen.values() for o in its if o["outcome"] == "captured")
        wait_until(
            lambda: survivor.get("/profiles", params={"trigger": "webhook"}).json()["count"]
            == captured,
            60,
            "every snapshot in the survivor's listing",
        )  # fmt: skip
    finally:
        for client in clients:
            client.close()
        for proc in processes:
            stop_process(proc, timeout_s=15)
        service.close()
        slow_a.close()
        for hub in hubs:
            hub.stop()
