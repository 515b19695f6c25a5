"""Fuzz the hub's OpenAPI document with schemathesis, over a real PostgreSQL index, a bucket of
snapshots and a real Prometheus for the ledger: with the database up, no 500 and every 200
answer as the document describes it (the ledger's windows, the keyset cursors, the snapshots'
verification and ledger fields); with the database stopped, nothing but what answers from the
bucket or `503 index_unavailable`.

The registered sidecar's URL is a port where nothing listens, and forwarding is capped at 1 s:
a fuzzed capture or alert reaches no job.
"""

from __future__ import annotations

import pytest
import schemathesis
from fleet_samples import HUB_TOKEN, fleet_snapshot
from fuzzing import errors_have_the_error_shape, fuzz_every_operation, no_server_error
from helpers import free_port, start_hub
from postgres_server import PostgresServer
from prometheus_server import start_prometheus
from s3_server import wait_until
from schemathesis.specs.openapi.checks import response_schema_conformance

from profiler_service.analysis.models import Severity
from profiler_service.store.bucket_client import BucketClient

TOKEN = "hub-fuzz-token"
EXAMPLES = 20  # per operation and run: the two runs together stay under three minutes
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def fuzzed_hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-fuzz")
    bucket = root / "bucket"
    bucket.mkdir()
    mirror = BucketClient(f"file://{bucket}")
    for i in range(1, 13):
        rules = (
            (("input_bound", Severity.CRITICAL),) if i % 2 else (("device_idle", Severity.WARNING),)
        )
        mirror.write_doc(fleet_snapshot(
            i, namespace=f"team-{'ab'[i % 2]}", target="trainer", minutes_ago=5 * i, rules=rules
        ))  # fmt: skip
    database = PostgresServer().start()
    prometheus = start_prometheus(root, {})
    hub = None
    try:
        hub = start_hub(root / "hub", {
            "PROFILER_STORE_URL": f"file://{bucket}",
            "PROFILER_HUB_DATABASE_URL": database.database(),
            "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
            "PROFILER_HUB_PROMETHEUS_URL": prometheus.url,
            "PROFILER_HUB_LEDGER_REFRESH_S": "1",
            "PROFILER_API_TOKEN": TOKEN,
            "PROFILER_HUB_TOKEN": HUB_TOKEN,
            "PROFILER_WEBHOOK_TOKEN": TOKEN,
            "PROFILER_HUB_FORWARD_TIMEOUT_S": "1",
        })  # fmt: skip
        with hub.client(headers=AUTH) as client:
            wait_until(lambda: client.get("/profiles").json().get("count") == 12, 60, "a sync")
            sidecar = {"name": "trainer-0", "namespace": "team-a", "targets": ["trainer"],
                       "url": f"http://127.0.0.1:{free_port()}"}  # fmt: skip
            registered = client.put(
                "/sidecars/trainer-0", json=sidecar,
                headers={"Authorization": f"Bearer {HUB_TOKEN}"},
            )  # fmt: skip
            assert registered.status_code in (200, 201), registered.text
        yield hub, database
    finally:
        if hub is not None:
            hub.stop()
        prometheus.stop()
        database.stop()


@schemathesis.check
def only_the_index_is_unavailable(ctx, response, case):
    """With the database down, a 5xx is the index's 503 (or readiness saying it)."""
    if response.status_code >= 500 and case.operation.path != "/readyz":
        assert response.status_code == 503, (response.status_code, response.text[:500])
        assert response.json()["error"] == "index_unavailable", response.text[:500]
    for leak in ("psycopg", "OperationalError", "sqlalche", "Traceback"):
        assert leak not in response.text, (leak, response.text[:500])
    return None


def test_fuzz_the_hub_with_its_database_up(fuzzed_hub):
    hub, _ = fuzzed_hub
    checks = [no_server_error, errors_have_the_error_shape, response_schema_conformance]
    assert fuzz_every_operation(hub.url, AUTH, EXAMPLES, checks) >= 15


def test_fuzz_the_hub_with_its_database_down(fuzzed_hub):
    hub, database = fuzzed_hub
    database.halt()
    try:
        with hub.client(headers=AUTH) as client:
            wait_until(lambda: client.get("/profiles").status_code == 503, 30, "the outage seen")
        checks = [errors_have_the_error_shape, only_the_index_is_unavailable]
        assert fuzz_every_operation(hub.url, AUTH, EXAMPLES, checks) >= 15
    finally:
        database.start()
