"""A job that shares no volume with the service: its profiler writes to PROFILER_CAPTURE_URL.

The job's own TensorFlow writes the capture through its filesystems (file:// to a folder outside
the store, and gs:// to a GCS API on loopback); the service reads it back with fsspec, analyses
it, publishes it in its store, and removes it from the URL.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from gcs_server import GcsServer
from helpers import free_port, launch_job, wait_for_status, wait_ready


def test_the_capture_is_fetched_from_the_url_and_removed_there(
    input_bound_job, service_factory, tmp_path
):
    incoming = tmp_path / "incoming"
    service = service_factory(
        [input_bound_job.address], {"PROFILER_CAPTURE_URL": f"file://{incoming}"}
    )
    with service.client() as client:
        body = client.post("/profile", params={"duration": "1s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    host = f"127.0.0.1_{input_bound_job.ready['profiler_port']}"
    assert body["hosts"] == [host]
    assert (service.store / "plugins" / "profile" / body["id"] / f"{host}.xplane.pb").stat().st_size
    assert "input_bound" in {f["rule"] for f in body["findings"]}
    assert incoming.is_dir()  # the job's TensorFlow wrote there ...
    assert list(incoming.iterdir()) == []  # ... and the service took it away


def test_a_url_the_jobs_tensorflow_cannot_write_fails_with_a_reason(
    input_bound_job, service_factory
):
    # TF has no memory:// filesystem (fsspec does, in the service's process: nothing leaves it).
    service = service_factory(
        [input_bound_job.address], {"PROFILER_CAPTURE_URL": "memory://incoming"}
    )
    with service.client() as client:
        started = client.post("/profile", params={"duration": "0.5s"})
        body = wait_for_status(client, started.json()["id"], {"failed", "ready"})
        assert body["status"] == "failed"
        assert body["error"]["code"] == "no_trace_events"
        assert "memory://incoming/" in body["error"]["detail"]
        assert "can the job's TensorFlow write there?" in body["error"]["detail"]
        assert client.get("/healthz").status_code == 200


@pytest.fixture(scope="module")
def gcs(tmp_path_factory) -> Iterator[GcsServer]:
    server = GcsServer("profiles", tmp_path_factory.mktemp("gcs")).start()
    yield server
    server.stop()


def test_a_job_writes_gs_through_tensorflows_own_gcs_filesystem(gcs, service_factory):
    # The job's TensorFlow uploads the capture to the GCS API (gcs_server.py has how a local
    # server stands in for Google's); the service lists, downloads and deletes it with gcsfs.
    args = ("--workload", "input-bound", "--profiler-port", str(free_port()))
    job = wait_ready(launch_job(*args, env=gcs.job_env))
    try:
        service = service_factory(
            [job.address], {"PROFILER_CAPTURE_URL": "gs://profiles/incoming", **gcs.service_env}
        )
        with service.client() as client:
            body = client.post("/profile", params={"duration": "1s", "wait": "true"}).json()
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    host = f"127.0.0.1_{job.ready['profiler_port']}"
    assert body["hosts"] == [host]
    assert "input_bound" in {f["rule"] for f in body["findings"]}
    assert (service.store / "plugins" / "profile" / body["id"] / f"{host}.xplane.pb").stat().st_size
    listing = httpx.get(f"{gcs.endpoint}/storage/v1/b/profiles/o", params={"prefix": "incoming/"})
    # Uploaded by the job, removed by the service. What stays is the directory marker TF's GCS
    # filesystem made for the URL's root (gcsfs writes none): the job wrote to the bucket.
    assert [o["name"] for o in listing.json().get("items", [])] == ["incoming/"]
