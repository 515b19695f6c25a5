"""classify_remote_failure on the profiler's real messages; collect_xplanes' checks."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from helpers import free_port

from profiler_service.capture.capturer import CaptureFailed, CaptureJob, collect_xplanes
from profiler_service.capture.failures import classify_remote_failure
from profiler_service.capture.remote import workers_gone
from profiler_service.models import CaptureOptions
from profiler_service.targets import Target

ADDRESS = "127.0.0.1:6199"
NO_TRACE_ERROR = (
    "RuntimeError: UNAVAILABLE: No trace event was collected because there were no responses "
    "from clients or the responses did not have trace data."
)
REFUSED_STDERR = (
    "2025-01-01 12:00:00.000000: E external/local_tsl/tsl/profiler/rpc/client/"
    "profiler_client.cc:113] Failed to connect to profiler server: "
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:6199: "
    "Failed to connect to remote host: Connection refused\n"
)
BENIGN_STDERR = (
    "2025-01-01 12:00:00.000000: I tensorflow/core/platform/cpu_feature_guard.cc:210] This "
    "TensorFlow binary is optimized to use available CPU instructions.\n"
)


def test_connection_refused_is_target_unreachable_even_with_no_trace_error():
    failure = classify_remote_failure(ADDRESS, NO_TRACE_ERROR, REFUSED_STDERR)
    assert isinstance(failure, CaptureFailed)
    assert failure.code == "target_unreachable"
    assert ADDRESS in failure.detail
    assert str(failure) == failure.detail


def test_dns_failure_is_target_unreachable():
    failure = classify_remote_failure(
        "nohost:6009",
        NO_TRACE_ERROR,
        "failed to resolve: DNS resolution failed for nohost:6009: "
        "C-ares status is not ARES_SUCCESS",
    )
    assert failure.code == "target_unreachable"
    assert "nohost:6009" in failure.detail


def test_another_session_is_profiler_busy():
    failure = classify_remote_failure(
        ADDRESS, "RuntimeError: UNAVAILABLE: Another profiling session active.", BENIGN_STDERR
    )
    assert failure.code == "profiler_busy"
    assert ADDRESS in failure.detail


def test_busy_message_found_in_stderr_too():
    failure = classify_remote_failure(ADDRESS, NO_TRACE_ERROR, "Another profiler is running.")
    assert failure.code == "profiler_busy"


def test_uninterpretable_address_is_invalid_target_address():
    failure = classify_remote_failure(
        "x", 'RuntimeError: INVALID_ARGUMENT: Could not interpret "x" as a host-port pair.', ""
    )
    assert failure.code == "invalid_target_address"
    assert "'x'" in failure.detail


def test_no_trace_events_with_benign_stderr():
    failure = classify_remote_failure(ADDRESS, NO_TRACE_ERROR, BENIGN_STDERR)
    assert failure.code == "no_trace_events"
    assert ADDRESS in failure.detail


@pytest.mark.parametrize(
    ("error", "stderr"),
    [
        ("RuntimeError: DEADLINE_EXCEEDED: Deadline Exceeded", ""),
        (NO_TRACE_ERROR, "status: DEADLINE_EXCEEDED"),
    ],
)
def test_deadline_exceeded_is_target_timeout(error: str, stderr: str):
    failure = classify_remote_failure(ADDRESS, error, stderr)
    assert failure.code == "target_timeout"
    assert ADDRESS in failure.detail


def test_write_errors_are_store_not_writable():
    failure = classify_remote_failure(
        ADDRESS, "RuntimeError: Failed to write", "open /store/x.xplane.pb: Read-only file system"
    )
    assert failure.code == "store_not_writable"
    assert "Read-only file system" in failure.detail


def test_unknown_error_is_capture_failed_with_its_last_line():
    failure = classify_remote_failure(ADDRESS, "RuntimeError: first\nINTERNAL: weird thing", "")
    assert failure.code == "capture_failed"
    assert "INTERNAL: weird thing" in failure.detail
    assert ADDRESS in failure.detail


def test_unknown_error_without_any_message():
    failure = classify_remote_failure(ADDRESS, "", "")
    assert failure.code == "capture_failed"
    assert "no message" in failure.detail


# ---- collect_xplanes ----------------------------------------------------------------------


def make_job(logdir: Path) -> CaptureJob:
    return CaptureJob(
        snapshot_id="s1",
        target=Target(name="job", workers=["grpc://127.0.0.1:6009"]),
        logdir=logdir,
        options=CaptureOptions(
            duration_ms=500, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        attempts=1,
        timeout_s=10.0,
    )


def test_collect_xplanes_without_files_is_capture_file_missing(tmp_path: Path):
    (tmp_path / "plugins" / "profile" / "s1").mkdir(parents=True)
    (tmp_path / "plugins" / "profile" / "s1" / "host1.trace.json.gz").write_bytes(b"x")
    with pytest.raises(CaptureFailed) as info:
        collect_xplanes(make_job(tmp_path))
    assert info.value.code == "capture_file_missing"
    assert str(tmp_path) in info.value.detail


def test_collect_xplanes_with_missing_logdir_is_capture_file_missing(tmp_path: Path):
    with pytest.raises(CaptureFailed) as info:
        collect_xplanes(make_job(tmp_path / "never-created"))
    assert info.value.code == "capture_file_missing"


def test_collect_xplanes_with_empty_file_is_capture_empty(tmp_path: Path):
    run = tmp_path / "plugins" / "profile" / "s1"
    run.mkdir(parents=True)
    (run / "host1.xplane.pb").write_bytes(b"data")
    (run / "host2.xplane.pb").write_bytes(b"")
    with pytest.raises(CaptureFailed) as info:
        collect_xplanes(make_job(tmp_path))
    assert info.value.code == "capture_empty"
    assert "host2.xplane.pb" in info.value.detail
    assert "host1.xplane.pb" not in info.value.detail


def test_collect_xplanes_returns_every_host_file_sorted(tmp_path: Path):
    run = tmp_path / "plugins" / "profile" / "s1"
    run.mkdir(parents=True)
    for host in ("worker-b", "worker-a"):
        (run / f"{host}.xplane.pb").write_bytes(b"data")
    assert collect_xplanes(make_job(tmp_path)).paths == [
        run / "worker-a.xplane.pb",
        run / "worker-b.xplane.pb",
    ]


def test_workers_that_stopped_answering_are_named_as_lost():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        alive = f"127.0.0.1:{listening.getsockname()[1]}"
        dead = f"127.0.0.1:{free_port()}"
        assert workers_gone([alive]) is None
        failure = workers_gone([alive, dead])
    assert failure.code == "target_lost"
    assert failure.detail.startswith(f"{dead} stopped answering during the capture")
    assert alive not in failure.detail


def test_connection_closed_mid_capture_is_target_lost():
    """The job died mid-capture: the first attempt sees the stream closed, the retry a refusal."""
    stderr = (
        "E0000 profiler_client.cc:213] UNAVAILABLE: Stream removed (Socket closed)\n"
        "E0000 profiler_client.cc:213] UNAVAILABLE: failed to connect to all addresses; "
        "Connection refused\n"
    )
    failure = classify_remote_failure(ADDRESS, NO_TRACE_ERROR, stderr)
    assert failure.code == "target_lost"
    assert ADDRESS in failure.detail and "mid-capture" in failure.detail


def test_write_error_detail_is_the_line_that_names_it_not_the_source_location():
    stderr = (
        "E0000 capture_profile.cc:90] RESOURCE_EXHAUSTED: /store/x.xplane.pb; No space left on "
        "device\n=== Source Location Trace: ===\nexternal/xla/profiler_client.cc:57\n"
    )
    failure = classify_remote_failure(ADDRESS, NO_TRACE_ERROR, stderr)
    assert failure.code == "store_not_writable"
    assert "No space left on device" in failure.detail
    assert "profiler_client.cc:57" not in failure.detail
