"""The HTTP contract: error shapes, duration bounds, tokens, path safety (real app, real store)."""

from __future__ import annotations

import pytest
from fakes import WritesBytes
from fastapi.testclient import TestClient
from helpers import RECORDED_CAPTURE

from profiler_service.api.app import create_app
from profiler_service.models import CaptureOptions, Snapshot


@pytest.fixture
def make_client(make_service):
    """A TestClient of the suite's service (tests/conftest.py)."""
    return lambda **settings: TestClient(create_app(make_service(**settings)))


@pytest.mark.parametrize("duration", ["abc", "0", "-1", "1h", "5x", "61s", "50ms", "1e3", "nan"])
def test_bad_durations_get_422_naming_the_allowed_range(make_client, duration):
    with make_client() as client:
        response = client.post("/profile", params={"duration": duration})
        assert response.status_code == 422
        body = response.json()
        assert body["error"] == "invalid_duration"
        assert "between 100ms and 60s" in body["detail"]
        assert client.get("/profiles").json()["count"] == 0


def test_duration_bounds_are_configurable(make_client):
    with make_client(duration_max_s=10, duration_default_s=2) as client:
        response = client.post("/profile", params={"duration": "11s"})
        assert response.status_code == 422
        assert "between 100ms and 10s" in response.json()["detail"]


def test_out_of_range_tracer_level_is_a_json_422(make_client):
    with make_client() as client:
        response = client.post("/profile", params={"host_tracer_level": 7})
        assert response.status_code == 422
        assert response.json()["error"] == "invalid_request"
        assert "host_tracer_level" in response.json()["detail"]


def test_unknown_target_name_is_refused_and_lists_configured_ones(make_client):
    with make_client() as client:
        response = client.post("/profile", params={"target": "10.0.0.1:6009"})
        assert response.status_code == 422
        assert response.json()["error"] == "unknown_target"
        assert "default" in response.json()["detail"]


def test_mutations_need_the_bearer_token_when_one_is_set(make_client):
    with make_client(api_token="s3cret") as client:
        missing = client.post("/profile", params={"duration": "abc"})
        assert missing.status_code == 401 and missing.json()["error"] == "unauthorized"
        assert missing.headers["WWW-Authenticate"] == "Bearer"
        wrong = client.post("/profile", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 403 and wrong.json()["error"] == "forbidden"
        assert (
            client.delete("/profiles/x", headers={"Authorization": "Bearer nope"}).status_code
            == 403
        )
        # The right token passes authentication and reaches validation.
        ok = client.post(
            "/profile", params={"duration": "abc"}, headers={"Authorization": "Bearer s3cret"}
        )
        assert ok.status_code == 422
        # Reads stay open.
        assert client.get("/profiles").status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/profiles/..",
        "/profiles/..%2F..%2Findex.sqlite",
        "/profiles/%2E%2E",
        "/profiles/a..b",
        "/profiles/x/files/..%2F..%2Findex.sqlite",
        "/profiles/../index.sqlite",
        "/profiles/nope/files/%2Fetc%2Fpasswd",
    ],
)
def test_path_traversal_is_a_json_404(make_client, path):
    with make_client() as client:
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["error"] in {"snapshot_not_found", "not_found", "file_not_found"}


def test_files_of_a_snapshot_cannot_escape_its_directory(make_service):
    service = make_service()
    snapshot = Snapshot(
        id="20260101-000000-default-abcdef",
        target="default",
        capture=CaptureOptions(
            duration_ms=100, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
    )
    logdir = service.store.begin(snapshot)
    xplane = logdir / "plugins" / "profile" / snapshot.id / "host.xplane.pb"
    xplane.parent.mkdir(parents=True)
    xplane.write_bytes(b"x" * 10)
    service.store.adopt_capture(snapshot, [xplane])
    service.store.publish(snapshot)
    with TestClient(create_app(service)) as client:
        base = f"/profiles/{snapshot.id}/files"
        assert client.get(f"{base}/host.xplane.pb").content == b"x" * 10
        for name in ["..%2F..%2Findex.sqlite", "snapshot.json", "%2Fetc%2Fpasswd", "missing.pb"]:
            response = client.get(f"{base}/{name}")
            assert response.status_code == 404, name
            assert response.json()["error"] == "file_not_found"


def test_unknown_routes_and_methods_answer_in_the_error_shape(make_client):
    with make_client() as client:
        assert client.get("/nope").json() == {"error": "not_found", "detail": "Not Found"}
        response = client.put("/profile")
        assert response.status_code == 405 and response.json()["error"] == "method_not_allowed"


def test_openapi_documents_the_contract(make_client):
    with make_client() as client:
        paths = client.get("/openapi.json").json()["paths"]
    for path in [
        "/profile",
        "/profiles",
        "/profiles/{snapshot_id}",
        "/profiles/{snapshot_id}/files/{name}",
        "/healthz",
        "/readyz",
    ]:
        assert path in paths, path
    assert "409" in paths["/profile"]["post"]["responses"]


def test_deleting_a_snapshot_removes_it_and_a_second_delete_is_404(make_service, tmp_path):
    service = make_service()
    snapshot = Snapshot(
        id="20260101-000000-default-000001",
        target="default",
        capture=CaptureOptions(
            duration_ms=100, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
    )
    service.store.begin(snapshot)
    service.store.publish(snapshot)
    with TestClient(create_app(service)) as client:
        assert client.delete(f"/profiles/{snapshot.id}").status_code == 204
        assert client.get(f"/profiles/{snapshot.id}").status_code == 404
        assert client.delete(f"/profiles/{snapshot.id}").json()["error"] == "snapshot_not_found"
    assert not (tmp_path / "store" / "plugins" / "profile" / snapshot.id).exists()


def test_an_offset_beyond_sqlite_integers_is_a_json_422_not_a_500(make_client):
    """Found by tests/faults/test_api_fuzz.py: the index's OFFSET overflowed into a 500."""
    with make_client() as client:
        response = client.get("/profiles", params={"offset": 2**64})
        assert response.status_code == 422
        assert response.json()["error"] == "invalid_request"
        assert "offset" in response.json()["detail"]


def test_the_list_is_light_and_the_whole_snapshot_one_read_away(make_service):
    """`GET /profiles` items carry no summary, lead-up or findings' evidence: a page of 50 is
    about 100 KB, where it was 1.4 MB of whole snapshots."""
    service = make_service(WritesBytes(RECORDED_CAPTURE.read_bytes()))
    with TestClient(create_app(service)) as client:
        made = [
            client.post("/profile", params={"duration": "100ms", "wait": "true"}).json()
            for _ in range(3)
        ]
        assert all(s["status"] == "ready" and s["findings"] for s in made), made
        page = client.get("/profiles")
        items = page.json()["data"]
        whole = client.get(items[0]["links"]["self"])
    assert [i["id"] for i in items] == [s["id"] for s in reversed(made)]
    item = items[0]
    assert "summary" not in item and "lead_up" not in item
    assert set(item["findings"][0]) == {"rule", "severity", "title"}
    assert whole.json()["summary"] and whole.json()["findings"][0]["evidence"]
    assert {k: v for k, v in whole.json().items() if k in item and k != "findings"} == {
        k: v for k, v in item.items() if k != "findings"
    }
    per_item = len(page.content) / len(items)
    # Measured: 3.3 KB an item (five findings' titles, what became of them since the job's last
    # snapshot, the capture's cost), 31 KB the whole snapshot of a one-step capture.
    assert per_item < 4_000 and 8 * per_item < len(whole.content), (per_item, len(whole.content))


def test_an_unexpected_error_answers_an_error_id_and_no_internals(make_service, caplog):
    """A bug's answer is JSON with a stable code and an error id; its text (here a path and a
    host) is only in the log, under that id, with the traceback."""
    service = make_service()

    def broken(*args, **kwargs):
        raise RuntimeError("connection to server at 10.1.2.3 failed; /secret/index.sqlite")

    service.store.list_docs = broken
    with TestClient(create_app(service), raise_server_exceptions=False) as client:
        answer = client.get("/profiles")
    assert answer.status_code == 500
    body = answer.json()
    assert body["error"] == "internal_error" and len(body["error_id"]) == 12
    assert body["error_id"] in body["detail"] and "GET /profiles" in body["detail"]
    assert "10.1.2.3" not in answer.text and "/secret" not in answer.text
    assert "RuntimeError" not in answer.text
    logged = [r for r in caplog.records if body["error_id"] in r.getMessage()]
    assert logged and logged[0].exc_info is not None


def test_wait_for_a_capture_that_failed_answers_its_failure_in_the_error_shape(make_client):
    # Nothing listens at the suite's unused target: the job's profiler failed the capture (502).
    with make_client(capture_attempts=1) as client:
        response = client.post("/profile", params={"duration": "100ms", "wait": "true"})
        assert response.status_code == 502, response.text
        body = response.json()
        assert body["error"] == "target_unreachable" and "127.0.0.1:9" in body["detail"]
        snapshot = body["snapshot"]
        assert snapshot["status"] == "failed" and snapshot["error"]["code"] == "target_unreachable"
        assert response.headers["location"] == f"/profiles/{snapshot['id']}"
        assert snapshot["links"]["self"] == f"/profiles/{snapshot['id']}"


def test_a_failed_snapshot_s_status_says_whose_failure_it_was():
    from profiler_service.api.errors import failed_snapshot_status
    from profiler_service.errors import SnapshotErrorCode as Code

    assert failed_snapshot_status(Code.TARGET_UNREACHABLE) == 502
    assert failed_snapshot_status(Code.CAPTURE_TIMEOUT) == 504
    assert failed_snapshot_status(Code.PROFILER_BUSY) == 409
    assert failed_snapshot_status(Code.STORE_NOT_WRITABLE) == 503
    assert failed_snapshot_status(Code.ANALYSIS_FAILED) == 500
    assert failed_snapshot_status("a_newer_sidecar_s_code") == 500
    # Never a 2xx: a failed capture does not read as a success.
    assert all(failed_snapshot_status(code) >= 400 for code in Code)


def test_docs_is_a_page_of_the_api_that_needs_no_network(make_client):
    """FastAPI's Swagger UI loads from a CDN and is blank offline: /docs is the service's own
    OpenAPI document, rendered on the server, with no script and nothing fetched elsewhere."""
    with make_client() as client:
        page = client.get("/docs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        html = page.text
        assert "<script" not in html and "cdn" not in html.lower()
        assert not [src for src in ("src='http", 'src="http', "href='http", 'href="http')
                    if src in html]  # fmt: skip
        document = client.get("/openapi.json").json()
        for path, item in document["paths"].items():
            for method in item:
                assert f"id='{method}-" in html and path in html, (method, path)
        assert "wait=true: the snapshot failed" in html  # the answers, from the document
        assert "id='schema-SnapshotPublic'" in html and "<code>findings</code>" in html
        assert client.get("/redoc").status_code == 404  # a CDN page too: not served


def test_the_hub_s_docs_page_needs_no_network_either():
    from profiler_service.hub.app import create_hub_app

    client = TestClient(create_hub_app(None))  # type: ignore[arg-type]  # no lifespan: no hub
    html = client.get("/docs").text
    assert "<script" not in html and "/fleet/ledger" in html
