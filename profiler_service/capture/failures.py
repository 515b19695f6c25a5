"""Map the profiler's errors to a stable code and a sentence a person can act on.

Remote failures reach Python as one generic RuntimeError; the cause is only in the C++ log on
stderr, so both the exception text and the captured stderr are read here.
"""

from __future__ import annotations

from profiler_service.capture.capturer import CaptureFailed
from profiler_service.errors import SnapshotErrorCode


def classify_remote_failure(
    address: str, error: str, stderr: str, capture_url: str | None = None
) -> CaptureFailed:
    """`capture_url`: where the job was asked to write (PROFILER_CAPTURE_URL), if not the store."""
    text = f"{error}\n{stderr}"
    if "Could not interpret" in text:
        return CaptureFailed(
            SnapshotErrorCode.INVALID_TARGET_ADDRESS,
            f"{address!r} is not a host:port the profiler client accepts",
        )
    if "Another profiling session active" in text or "Another profiler is running" in text:
        return CaptureFailed(
            SnapshotErrorCode.PROFILER_BUSY,
            f"the profiler server at {address} is already running another "
            "profiling session (TensorFlow allows one at a time); retry later",
        )
    if any(sign in text for sign in _CONNECTION_LOST):
        return CaptureFailed(
            SnapshotErrorCode.TARGET_LOST,
            f"the profiler server at {address} closed the connection during the capture: "
            "the job exited, crashed or restarted mid-capture",
        )
    if "Connection refused" in text or "failed to connect to all addresses" in text:
        return CaptureFailed(
            SnapshotErrorCode.TARGET_UNREACHABLE,
            f"profiler server unreachable at {address}: nothing is listening "
            "there; does the job call tf.profiler.experimental.server.start(PORT)?",
        )
    if "DNS resolution failed" in text or "Name or service not known" in text:
        return CaptureFailed(
            SnapshotErrorCode.TARGET_UNREACHABLE,
            f"profiler server unreachable at {address}: the host name does not resolve",
        )
    if "DEADLINE_EXCEEDED" in text or "Deadline Exceeded" in text:
        return CaptureFailed(
            SnapshotErrorCode.TARGET_TIMEOUT,
            f"the profiler server at {address} did not answer in time; the job may "
            "be overloaded, or the trace too large to collect",
        )
    write_error = _line_with(text, _WRITE_ERRORS)
    if write_error:
        return CaptureFailed(
            SnapshotErrorCode.STORE_NOT_WRITABLE,
            f"the profiler could not write the capture into the store: {write_error}",
        )
    if "No trace event was collected" in text and capture_url:
        # The server's reason (a scheme TF cannot write, no credentials) is only in the job's log.
        return CaptureFailed(
            SnapshotErrorCode.NO_TRACE_EVENTS,
            f"the profiler server at {address} returned no capture written to {capture_url}: "
            "can the job's TensorFlow write there? (TF 2.21 writes gs:// itself; s3:// needs "
            "tensorflow-io; the job's credentials must allow it) The job's log says why",
        )
    if "No trace event was collected" in text:
        return CaptureFailed(
            SnapshotErrorCode.NO_TRACE_EVENTS,
            f"the profiler server at {address} answered but collected no trace "
            "events; was the job running TensorFlow work during the capture?",
        )
    return CaptureFailed(
        SnapshotErrorCode.CAPTURE_FAILED,
        f"capture from {address} failed: {_last_line(error or stderr)}",
    )


# The job's profiler server went away mid-capture (it answered when the capture began).
_CONNECTION_LOST = ("Socket closed", "Stream removed", "Connection reset")
_WRITE_ERRORS = ("Read-only file system", "Permission denied", "No space left")


def _line_with(text: str, phrases: tuple[str, ...]) -> str:
    """The first log line naming one of `phrases` (the last line is often a source location)."""
    for line in text.splitlines():
        if any(phrase in line for phrase in phrases):
            return line.strip()[:500]
    return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "no message"
