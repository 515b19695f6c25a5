"""Schemathesis over a running service's OpenAPI document: the sidecar's and the hub's fuzz
(faults/test_api_fuzz.py, hub/test_hub_api_fuzz.py). A plain module, like helpers.py."""

from __future__ import annotations

import hypothesis
import schemathesis

from profiler_service.api.errors import FAILED_SNAPSHOT_STATUS

# Answers that are not errors in the error shape: readiness reports its checks.
_NOT_ERROR_SHAPED = {"/readyz"}


@schemathesis.check
def no_server_error(ctx, response, case):
    """5xx is a bug, except 503 (the documented "not now": unready, store not writable) and a
    waited-for snapshot's documented gateway status (502/504: the job's profiler failed it)."""
    status = response.status_code
    if status < 500 or status == 503:
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    code = body.get("error") if isinstance(body, dict) else None
    documented = FAILED_SNAPSHOT_STATUS.get(code) == status and status != 500
    assert documented, (status, response.text[:500])
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


_SETTINGS = dict(  # and max_examples, per run
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
)


def fuzz_every_operation(
    url: str, headers: dict[str, str], examples: int, checks: list | None = None
) -> int:
    """Fuzz each operation of the /openapi.json at `url`, `examples` cases each, with `checks`
    (no 5xx but 503, every error in the error shape); fail with every operation that broke."""
    checks = checks or [no_server_error, errors_have_the_error_shape]
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    failures, operations = [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @hypothesis.settings(max_examples=examples, **_SETTINGS)
        @hypothesis.given(case=operation.as_strategy())
        def fuzz(case):
            # The case's own generated Authorization (from the bearer scheme) would win a merge.
            case.headers = {**(case.headers or {}), **headers}
            case.call_and_validate(checks=checks, timeout=30)

        try:
            fuzz()
        except Exception as exc:  # collect them all, then fail once with each one's reason
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)
    return operations
