"""Fuzz the service's OpenAPI document with schemathesis: no 500s, every error `{error, detail}`.

A real `profiler-service serve` process on loopback. Its only target is 127.0.0.1:9 (the discard
port: nothing listens, so a fuzzed capture fails at once as target_unreachable and nothing is ever
traced), captures are capped at 1 s, and an API token is set: the unauthenticated run gets 401s
on every mutation and webhook, the authenticated run reaches the handlers.
"""

from __future__ import annotations

import pytest
from fuzzing import fuzz_every_operation
from helpers import start_service

TOKEN = "fuzz-token"
EXAMPLES = 30  # per operation and run: the two runs together stay well under two minutes


@pytest.fixture(scope="module")
def fuzzed_service(tmp_path_factory):
    env = {
        "PROFILER_API_TOKEN": TOKEN,
        "PROFILER_DURATION_MAX_S": "1",
        "PROFILER_DURATION_DEFAULT_S": "0.5",
        "PROFILER_CAPTURE_GRACE_S": "2",
        "PROFILER_CAPTURE_ATTEMPTS": "1",
        "PROFILER_ANALYSIS_TIMEOUT_S": "10",
    }
    store = tmp_path_factory.mktemp("fuzz") / "store"
    service = start_service(store, ["grpc://127.0.0.1:9"], env)
    yield service
    service.stop()


def test_fuzz_without_credentials(fuzzed_service):
    assert fuzz_every_operation(fuzzed_service.url, {}, EXAMPLES) >= 10


def test_fuzz_with_the_api_token(fuzzed_service):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert fuzz_every_operation(fuzzed_service.url, headers, EXAMPLES) >= 10
