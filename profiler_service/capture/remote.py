"""Remote capture through XProf's capture client, in a child process.

The child keeps TensorFlow out of the sidecar, lets a hung trace be killed at its deadline, and
gives us the C++ log on stderr, the only place that says why a capture failed.
"""

from __future__ import annotations

import json
import socket

from profiler_service.capture.capturer import Captured, CaptureFailed, CaptureJob, collect_xplanes
from profiler_service.capture.failures import classify_remote_failure
from profiler_service.capture.remote_child import RESULT_MARKER
from profiler_service.child_process import Ending, run_worker
from profiler_service.errors import SnapshotErrorCode

CHILD = "profiler_service.capture.remote_child"
# What the client says when a worker died mid-trace: then we ask whether the workers still answer.
_MAYBE_GONE = (SnapshotErrorCode.NO_TRACE_EVENTS, SnapshotErrorCode.CAPTURE_FAILED)


class RemoteCapturer:
    applies_tracer_levels = True

    def __init__(self, capture_url: str | None = None):
        # Set: the job's profiler writes to this URL, not to our store (no shared volume).
        self.capture_url = None
        if capture_url:
            from profiler_service.capture.capture_url import CaptureUrl  # fsspec: sidecar only

            self.capture_url = CaptureUrl(capture_url)

    def capture(self, job: CaptureJob) -> Captured:
        if self.capture_url is None:
            self._trace(job, str(job.logdir))
            return collect_xplanes(job)
        try:
            self._trace(job, self.capture_url.logdir(job.snapshot_id))
            self.capture_url.fetch(job.snapshot_id, job.logdir)
        finally:
            self.capture_url.remove(job.snapshot_id)
        return collect_xplanes(job)

    def _trace(self, job: CaptureJob, logdir: str) -> None:
        request = {
            # Comma-separated: the client profiles every worker at once, each writing its own
            # <host>_<port>.xplane.pb. (worker_list asks service_addr to fan out, which only
            # TPU-style profiler services implement: TF's answers UNIMPLEMENTED.)
            "service_addr": ",".join(job.target.workers),
            "logdir": logdir,
            "worker_list": "",
            "include_dataset_ops": job.options.include_dataset_ops,
            "duration_ms": job.options.duration_ms,
            "num_tracing_attempts": job.attempts,
            "options": {
                "session_id": job.snapshot_id,
                "host_tracer_level": job.options.host_tracer_level,
                "python_tracer_level": job.options.python_tracer_level,
                "device_tracer_level": job.options.device_tracer_level,
            },
        }
        run = run_worker(CHILD, [json.dumps(request)], RESULT_MARKER, job.timeout_s)
        if run.ending is Ending.TIMED_OUT:
            raise CaptureFailed(
                SnapshotErrorCode.CAPTURE_TIMEOUT,
                f"the capture from {', '.join(job.target.workers)} did not finish within "
                f"{job.timeout_s:g} s (duration + grace) and was stopped",
            )
        result = json.loads(run.result) if run.result else {"ok": False}
        if not result.get("ok"):
            failure = classify_remote_failure(
                ", ".join(job.target.workers),
                result.get("error", run.how_it_ended()),
                run.stderr,
                logdir if self.capture_url else None,
            )
            if failure.code in _MAYBE_GONE:
                failure = workers_gone(job.target.workers) or failure
            raise failure


def workers_gone(workers: list[str]) -> CaptureFailed | None:
    """Workers that stopped answering. A worker that crashes while its trace is collected
    (TF 2.21, MWMS) leaves the client saying only that no trace event was collected."""
    gone = [w for w in workers if connect_error(w) is not None]
    if not gone:
        return None
    return CaptureFailed(
        SnapshotErrorCode.TARGET_LOST,
        f"{', '.join(gone)} stopped answering during the capture: the job exited, crashed or "
        "restarted (on TF 2.21 a traced MultiWorkerMirroredStrategy worker can abort; see "
        "docs/sidecar-and-agent.md)",
    )


def connect_error(address: str) -> str | None:
    """Why nothing accepts a connection at a profiler server's host:port; None if something does."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return None
    except OSError as exc:
        return str(exc.strerror or exc)
