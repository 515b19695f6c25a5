"""A sidecar that cannot reach the hub registers through the shared bucket instead
(PROFILER_HUB_REGISTER_IN_BUCKET): a record under `sidecars/` the hub reads at each sync, kept
while its heartbeats rewrite it, dropped after the TTL once they stop."""

from __future__ import annotations

import signal

from helpers import start_hub, start_service, stop_process
from s3_server import wait_until

HUB_TOKEN = "bucket-fleet"


def test_a_sidecar_registers_through_the_bucket_and_drops_out_after_the_ttl(tmp_path):
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    hub = start_hub(
        tmp_path / "hub",
        {
            "PROFILER_STORE_URL": f"file://{bucket}",
            "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
            "PROFILER_HUB_SIDECAR_TTL_S": "4",
            "PROFILER_HUB_TOKEN": HUB_TOKEN,
        },
    )
    sidecar = start_service(
        tmp_path / "sidecar",
        ["quiet=grpc://127.0.0.1:1"],
        {
            "PROFILER_STORE_URL": f"file://{bucket}",
            "PROFILER_HUB_REGISTER_IN_BUCKET": "true",
            "PROFILER_HUB_HEARTBEAT_S": "0.5",
            "PROFILER_HUB_TOKEN": HUB_TOKEN,
            "PROFILER_POD_NAME": "quiet-0",
            "PROFILER_POD_NAMESPACE": "offline",
        },
    )
    try:
        with hub.client() as client:
            listed = wait_until(
                lambda: client.get("/sidecars").json()["data"], 30, "the bucket registration"
            )
            assert [(s["name"], s["namespace"], s["via"]) for s in listed] == [
                ("quiet-0", "offline", "bucket")
            ]
            assert listed[0]["targets"] == ["quiet"] and listed[0]["url"] == sidecar.url
            assert (bucket / "sidecars" / "offline.quiet-0.json").is_file()
            # The hub routes to it like to any registered sidecar.
            routed = client.post(
                "/webhooks/alertmanager",
                json={"alerts": [{"labels": {"pod": "quiet-0", "namespace": "offline"}}]},
            ).json()["alerts"][0]
            assert routed["sidecar"] == "offline/quiet-0" and routed["outcome"] == "captured"

            sidecar.proc.send_signal(signal.SIGKILL)  # its record stays, and ages
            sidecar.proc.wait()
            wait_until(lambda: client.get("/sidecars").json()["count"] == 0, 15, "the TTL")
    finally:
        stop_process(sidecar.proc)
        hub.stop()
