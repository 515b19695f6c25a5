"""Fuzz the service's OpenAPI document with schemathesis: no 500s, every error `{error, detail}`.

A real `profiler-service serve` process on loopback. Its only target is 127.0.0.1:9 (the discard
port: nothing listens, so a fuzzed capture fails at once as target_unreachable and nothing is ever
traced), captures are capped at 1 s, and an API token is set: the unauthenticated run gets 401s
on every mutation and webhook, the authenticated run reaches the handlers.
"""

from __future__ import annotations

import hypothesis
import pytest
import schemathesis
from helpers import start_service

TOKEN = "fuzz-token"
EXAMPLES = 30  # per operation and run: the two runs together stay well under two minutes

# Answers that are not errors in the error shape: readiness reports its checks.
_NOT_ERROR_SHAPED = {"/readyz"}


@schemathesis.check
def no_server_error(ctx, response, case):
    """5xx is a bug, except 503: the documented "not now" (unready, store not writable)."""
    assert response.status_code < 500 or response.status_code == 503, (
        response.status_code,
        response.text[:500],
    )
    return None


@schemathesis.check
def errors_have_the_error_shape(ctx, response, case):
    if response.status_code < 400 or case.operation.path in _NOT_ERROR_SHAPED:
        return None
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    assert content_type.startswith("application/json"), (response.status_code, content_type)
    body = response.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str) and body["error"], body
    assert isinstance(body.get("detail"), str) and body["detail"], body
    return None


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


_SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
)
_CHECKS = [no_server_error, errors_have_the_error_shape]


def fuzz_every_operation(url: str, headers: dict[str, str]) -> int:
    """Fuzz each operation of the service's /openapi.json; fail with every operation that broke."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    failures, operations = [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @_SETTINGS
        @hypothesis.given(case=operation.as_strategy())
        def fuzz(case):
            # The case's own generated Authorization (from the bearer scheme) would win a merge.
            case.headers = {**(case.headers or {}), **headers}
            case.call_and_validate(checks=_CHECKS, timeout=30)

        try:
            fuzz()
        except Exception as exc:  # collect them all, then fail once with each one's reason
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)
    return operations


def test_fuzz_without_credentials(fuzzed_service):
    assert fuzz_every_operation(fuzzed_service.url, {}) >= 10


def test_fuzz_with_the_api_token(fuzzed_service):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert fuzz_every_operation(fuzzed_service.url, headers) >= 10
