"""A snapshot says which process answered (issue 53): the host name the job's profiler wrote
into the capture, and the job's pid where the sidecar sees it; where two jobs share the port
(gRPC's profiler server sets SO_REUSEPORT), both pids and that either may have answered."""

from __future__ import annotations

import socket

from helpers import start_job


def capture(service) -> dict:
    with service.client() as client:
        body = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
        assert body["status"] == "ready", body.get("error")
        body["report"] = client.get(body["links"]["report"]).text
    return body


def test_the_snapshot_names_the_host_and_the_process_that_answered(
    input_bound_job, service_factory, tmp_path
):
    service = service_factory([input_bound_job.address], store=tmp_path / "one")
    body = capture(service)
    [source] = body["sources"]
    address = input_bound_job.address.removeprefix("grpc://")
    assert source["address"] == address and source["file"].endswith(".xplane.pb")
    assert source["hostname"] == socket.gethostname()  # what the job's profiler wrote
    assert source["pids"] == [input_bound_job.proc.pid] and source["note"] is None
    pid = input_bound_job.proc.pid
    assert f"from {socket.gethostname()} (pid {pid}) at {address}</span>" in body["report"]

    # A second job on the same port: the kernel hands the capture to either.
    twin = start_job(
        "--workload", "input-bound", "--profiler-port", str(input_bound_job.profiler_port),
        "--seconds", "120",
    )  # fmt: skip
    try:
        second = service_factory([input_bound_job.address], store=tmp_path / "two")
        [shared] = capture(second)["sources"]
    finally:
        twin.stop()
    assert shared["pids"] == sorted([input_bound_job.proc.pid, twin.proc.pid])
    assert "2 processes listen on port" in shared["note"] and "SO_REUSEPORT" in shared["note"]
    assert shared["hostname"] == socket.gethostname()
