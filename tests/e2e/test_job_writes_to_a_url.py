"""A job that shares no volume with the service: its profiler writes to PROFILER_CAPTURE_URL.

The job's own TensorFlow writes the capture through its filesystems (here file://, to a folder
outside the store); the service reads it back with fsspec, analyses it, publishes it in its store,
and removes it from the URL. gs:// goes the same way through TF's GCS filesystem and gcsfs, but
TF 2.21 has no setting to point that filesystem at a local GCS emulator, so it is not run here.
"""

from __future__ import annotations

from helpers import wait_for_status


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
