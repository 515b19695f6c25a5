"""Errors with a stable code and a human sentence: the API's `ServiceError`s (rendered as
`{error, detail}`), a failed snapshot's `SnapshotErrorCode`s and the pipeline's `PipelineFailure`
that carries one."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from profiler_service.described import Described


class ServiceError(Exception):
    """Base: `code` is stable (clients match on it), `detail` is for people."""

    code = "error"
    status_code = 500

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None, **extra: object):
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra


class InvalidDuration(ServiceError):
    """A duration outside the allowed range or not understood; the detail names the range."""

    code = "invalid_duration"
    status_code = 422


class InvalidRequest(ServiceError):
    """A request parameter is missing or malformed."""

    code = "invalid_request"
    status_code = 422


class UnknownTarget(ServiceError):
    """The request names a target that is not configured."""

    code = "unknown_target"
    status_code = 422


class CaptureBusy(ServiceError):
    """The target is being captured; `Retry-After` says when to try again."""

    code = "capture_in_progress"
    status_code = 409


class SnapshotBusy(ServiceError):
    """The snapshot is still capturing or analysing (delete it when it has finished)."""

    code = "snapshot_in_progress"
    status_code = 409


class SnapshotNotFound(ServiceError):
    """No snapshot with that id."""

    code = "snapshot_not_found"
    status_code = 404


class NoBaseline(ServiceError):
    """A comparison without `baseline`, and the snapshot's target has no baseline."""

    code = "no_baseline"
    status_code = 404


class FileNotFound(ServiceError):
    """The snapshot has no file of that name."""

    code = "file_not_found"
    status_code = 404


class StoreNotWritable(ServiceError):
    """The store refused a write (read-only, full, permissions); reads still work."""

    code = "store_not_writable"
    status_code = 503


class StoreOwned(ServiceError):
    """Another live process (a sidecar, an agent) owns the snapshot store: `capture` and a second
    `serve` on it are refused (exit 2), naming the owner and how to ask it instead."""

    code = "store_owned"
    status_code = 409


class IndexUnavailable(ServiceError):
    """The fleet hub's index (its database) does not answer: listings and the fleet page wait
    for it, the detail says since when; a snapshot by id, its report and its files still
    answer from the bucket."""

    code = "index_unavailable"
    status_code = 503


class BucketUnreachable(ServiceError):
    """The fleet hub could not read the bucket for a whole snapshot or a file; its listings,
    answered from its index, still work."""

    code = "bucket_unreachable"
    status_code = 503


class InternalError(ServiceError):
    """A bug in the service. The answer carries an `error_id` and no exception text (it may
    hold paths, hosts or a driver's message); the log line with that id has the traceback. A
    capture it kept from starting left nothing behind."""

    code = "internal_error"
    status_code = 500

    @classmethod
    def logged(cls, exc: BaseException, what: str, log: logging.Logger) -> InternalError:
        """Log `exc` with its traceback under a new error id; the error that says only that."""
        error_id = uuid.uuid4().hex[:12]
        log.error("internal error %s: %s", error_id, what, exc_info=exc)
        return cls(
            f"{what}: an unexpected error in the service (error id {error_id}: its log has "
            "the details under that id)",
            error_id=error_id,
        )


class Unauthorized(ServiceError):
    """No valid credentials (API token, webhook token or basic auth)."""

    code = "unauthorized"
    status_code = 401


class Forbidden(ServiceError):
    """Credentials were given but are wrong."""

    code = "forbidden"
    status_code = 403


class InvalidSignature(ServiceError):
    """A Grafana webhook's HMAC signature or timestamp does not check out."""

    code = "invalid_signature"
    status_code = 401


class InvalidPayload(ServiceError):
    """A webhook body that is not JSON or not a webhook payload."""

    code = "invalid_payload"
    status_code = 400


class PayloadTooLarge(ServiceError):
    """A webhook body larger than `webhook_max_body_bytes`."""

    code = "payload_too_large"
    status_code = 413


class SnapshotErrorCode(Described):
    """A failed snapshot's `error.code`, each with what it means.

    The value is what `snapshot.json`, the API and `profiler_capture_errors_total{error}` carry;
    the description is the reference page's (docs/reference/errors-and-outcomes.md), so a code
    cannot be added without saying what it means.
    """

    TARGET_UNREACHABLE = (
        "target_unreachable",
        "Nothing listens at the target's address, or its name does not resolve.",
    )
    TARGET_LOST = (
        "target_lost",
        "The job's profiler server closed the connection mid-capture, or a worker no longer answers"
        " once a capture came back empty: the job exited, crashed or restarted.",
    )
    TARGET_TIMEOUT = (
        "target_timeout",
        "The profiler server did not answer in time.",
    )
    TARGET_DISCOVERY_FAILED = (
        "target_discovery_failed",
        "A `tf-config://` or `dns://` target gave no workers: the detail says why (file missing, "
        "not JSON, no such tasks, name does not resolve).",
    )
    INVALID_TARGET_ADDRESS = (
        "invalid_target_address",
        "The configured address is not a host:port.",
    )
    PROFILER_BUSY = (
        "profiler_busy",
        "The job is already being profiled (TensorFlow allows one session per process).",
    )
    NO_TRACE_EVENTS = (
        "no_trace_events",
        "The profiler answered but collected nothing (was the job running TF ops?), or, with "
        "`capture_url`, wrote nothing there (the job's log says why).",
    )
    CAPTURE_TIMEOUT = (
        "capture_timeout",
        "The capture ran past duration + `capture_grace_s` and was stopped.",
    )
    CAPTURE_FILE_MISSING = (
        "capture_file_missing",
        "The profiler reported success but no file appeared: the store volume is not shared at the "
        "same absolute path.",
    )
    CAPTURE_EMPTY = (
        "capture_empty",
        "A 0-byte `.xplane.pb` (XSpaces over 2 GB are written as 0 bytes): capture less.",
    )
    CAPTURE_FETCH_FAILED = (
        "capture_fetch_failed",
        "With `capture_url`: the job wrote the capture but the service could not read it back "
        "(credentials, the bucket down).",
    )
    CAPTURE_FAILED = (
        "capture_failed",
        "Any other capture failure; the detail quotes the profiler's message.",
    )
    STORE_NOT_WRITABLE = (
        "store_not_writable",
        "The profiler could not write into the store (read-only, full: the detail quotes the "
        "profiler's line).",
    )
    ANALYSIS_FAILED = (
        "analysis_failed",
        "XProf could not read the capture (corrupt or truncated); the files are kept.",
    )
    ANALYSIS_TIMEOUT = (
        "analysis_timeout",
        "The analysis took longer than `analysis_timeout_s`; the files are kept.",
    )
    ANALYSIS_TOO_LARGE = (
        "analysis_too_large",
        "The analysis worker passed `analysis_max_memory_bytes` and was stopped (or the kernel "
        "killed it); the capture is kept: capture shorter, at lower tracer levels, or give the "
        "analysis more memory.",
    )
    ANALYSIS_UNAVAILABLE = (
        "analysis_unavailable",
        "An agent without XProf in its environment and no (or a missing) `analysis_python`; the "
        "capture is kept (`profiler-service analyze PATH` reads it).",
    )
    INTERRUPTED = (
        "interrupted",
        "The service stopped (crash, kill) while the snapshot was in flight; found at the next "
        "start, partial files removed.",
    )
    INTERNAL_ERROR = (
        "internal_error",
        "A bug in the service; the detail names the exception.",
    )


class PipelineFailure(Exception):
    """A capture or analysis that ended without a snapshot: one type for the controller to
    catch, with the code stored in the snapshot's error and a sentence for people."""

    # Whether the files written so far are worth keeping (under STORE/failed/<id>/run/).
    keep_files = False

    def __init__(self, code: SnapshotErrorCode | str, detail: str):
        super().__init__(detail)
        self.code = SnapshotErrorCode(code)  # an unknown code fails here, not in the docs
        self.detail = detail


@dataclass(frozen=True)
class Failed:
    """A part that could not be had, and why: returned where a failure is a note, not an end
    (an optional XProf tool, a sidecar that did not answer), in place of an error string."""

    reason: str
