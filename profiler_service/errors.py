"""Errors with a stable code and a human sentence; the API renders them as `{error, detail}`."""

from __future__ import annotations


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
    code = "invalid_duration"
    status_code = 422


class InvalidRequest(ServiceError):
    code = "invalid_request"
    status_code = 422


class UnknownTarget(ServiceError):
    code = "unknown_target"
    status_code = 422


class CaptureBusy(ServiceError):
    code = "capture_in_progress"
    status_code = 409


class SnapshotBusy(ServiceError):
    code = "snapshot_in_progress"
    status_code = 409


class SnapshotNotFound(ServiceError):
    code = "snapshot_not_found"
    status_code = 404


class NoBaseline(ServiceError):
    code = "no_baseline"
    status_code = 404


class FileNotFound(ServiceError):
    code = "file_not_found"
    status_code = 404


class StoreNotWritable(ServiceError):
    code = "store_not_writable"
    status_code = 503


class Unauthorized(ServiceError):
    code = "unauthorized"
    status_code = 401


class Forbidden(ServiceError):
    code = "forbidden"
    status_code = 403


class InvalidSignature(ServiceError):
    code = "invalid_signature"
    status_code = 401


class InvalidPayload(ServiceError):
    code = "invalid_payload"
    status_code = 400


class PayloadTooLarge(ServiceError):
    code = "payload_too_large"
    status_code = 413
