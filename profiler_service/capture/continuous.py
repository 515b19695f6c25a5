"""The look-back trace: the job's profiler traces all the time, so a capture can begin before its
trigger. Off unless PROFILER_LOOKBACK_TRACE_S is set; sidecar targets with one worker only.

TensorFlow 2.21's profiler server (the first release with it) keeps a continuous session:
`StartContinuousProfiling(ProfileRequest)`, then `GetSnapshot()` answers the XSpace traced since
the start or the previous snapshot and starts anew, then `StopContinuousProfiling()`. It is not a
ring: the sidecar takes a snapshot every PROFILER_LOOKBACK_TRACE_S and drops it, so at most that
much trace waits in the job's memory. A capture waits its duration and takes the next snapshot:
the trace then starts at the last rotation, between 0 and PROFILER_LOOKBACK_TRACE_S before the
trigger (`capture.lookback_ms` says how long).

XProf's own client for this (`_pywrap_profiler_plugin.start_continuous_profiling`) forces host
and Python tracing off (it is built for TPU circular buffers), so a CPU job answers an empty trace
and XProf writes nothing. This client sends our tracer levels through grpcio; the XSpace comes
back in the answer and the sidecar writes the file itself, so no shared volume is needed.

While the session runs, the job's profiler serves no other session: every capture of this target
goes through it, and an in-process `tf.profiler` call in the job fails as busy.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import grpc

from profiler_service.capture.capturer import Captured, CaptureFailed, CaptureJob, collect_xplanes
from profiler_service.config import CaptureSettings
from profiler_service.errors import SnapshotErrorCode
from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.proto_subset import F, message_classes
from profiler_service.targets import Target

log = logging.getLogger(__name__)

SERVICE = "/tensorflow.ProfilerService/"
# tsl/profiler/protobuf/profiler_options.proto and profiler_service.proto (TF 2.21).
PROFILER_FIELDS = {
    "ProfileOptions": [
        ("include_dataset_ops", 1, F.TYPE_BOOL, False, None),
        ("host_tracer_level", 2, F.TYPE_UINT32, False, None),
        ("device_tracer_level", 3, F.TYPE_UINT32, False, None),
        ("python_tracer_level", 4, F.TYPE_UINT32, False, None),
        ("version", 5, F.TYPE_UINT32, False, None),
    ],
    "ProfileRequest": [
        ("opts", 4, F.TYPE_MESSAGE, False, "ProfileOptions"),
        ("session_id", 6, F.TYPE_STRING, False, None),
    ],
    "ProfileResponse": [
        ("empty_trace", 7, F.TYPE_BOOL, False, None),
        ("xspace", 8, F.TYPE_BYTES, False, None),  # an XSpace message: the .xplane.pb bytes
    ],
}
START_RETRY_S = 5.0  # a job not (yet) answering is asked again this often
RPC_TIMEOUT_S = 30.0


@cache
def _messages() -> dict[str, Any]:
    return message_classes("profiler_service.profiler", PROFILER_FIELDS)


class ContinuousSession(LoopOwner):
    """One job's continuous session, kept running and rotated by a thread of its own."""

    def __init__(self, address: str, settings: CaptureSettings, rotate_s: float):
        self.address = address
        self.settings = settings
        self.rotate_s = rotate_s
        self._channel = grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 2**31 - 1)]
        )
        self._lock = threading.Lock()  # one RPC at a time; a capture holds it from start to end
        self._loop = BackgroundLoop(f"lookback-trace-{address}", self._keep, join_s=RPC_TIMEOUT_S)
        self.running = False
        self.since: float | None = None  # unix time the trace now held by the job began
        self.error: str | None = None

    def _call(self, method: str, request: bytes, timeout_s: float = RPC_TIMEOUT_S) -> bytes:
        rpc = self._channel.unary_unary(
            SERVICE + method, request_serializer=None, response_deserializer=None
        )
        return rpc(request, timeout=timeout_s)

    def _start(self) -> None:
        m = _messages()
        s = self.settings
        request = m["ProfileRequest"](
            session_id="profiler-service-lookback",
            opts=m["ProfileOptions"](
                version=1,
                include_dataset_ops=s.include_dataset_ops,
                host_tracer_level=s.host_tracer_level,
                device_tracer_level=s.device_tracer_level,
                python_tracer_level=s.python_tracer_level,
            ),
        )
        try:
            self._call("StartContinuousProfiling", request.SerializeToString())
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
            # Ours, left by a sidecar that restarted (or another client's): the next snapshot
            # drops what it traced so far either way.
            self._call("GetSnapshot", b"")
        self.running, self.since, self.error = True, time.time(), None

    def snapshot(self) -> tuple[bool, bytes, float]:
        """(empty, XSpace bytes, when that trace began); the job starts a new one at once."""
        began = self.since or time.time()
        answer = _messages()["ProfileResponse"].FromString(self._call("GetSnapshot", b""))
        self.since = time.time()
        return answer.empty_trace, answer.xspace, began

    def _keep(self) -> float:
        """Start the job's session if it is not running, rotate it when due; the wait until
        the next rotation (`START_RETRY_S` while the job does not answer)."""
        with self._lock:
            try:
                if not self.running:
                    self._start()
                    log.info("look-back trace running on %s", self.address)
                elif time.time() - (self.since or 0) >= self.rotate_s:
                    self.snapshot()  # dropped: only the last rotate_s are kept
                    log.debug("look-back trace on %s rotated", self.address)
                return max(0.1, self.rotate_s - (time.time() - (self.since or 0)))
            except grpc.RpcError as exc:
                if self.running or self.error is None:
                    log.warning("look-back trace on %s: %s", self.address, exc.details())
                self.running, self.error = False, f"{exc.code().name}: {exc.details()}"
                return START_RETRY_S

    def stop(self, timeout_s: float | None = None) -> None:
        """End the rotation, then the job's session (what it traced is dropped)."""
        self._loop.stop(timeout_s)
        with self._lock:
            if self.running:
                try:
                    self._call("StopContinuousProfiling", b"", timeout_s=5)
                except grpc.RpcError as exc:
                    log.info("could not stop the look-back trace on %s: %s", self.address, exc)
            self.running = False
        self._channel.close()

    def capture(self, job: CaptureJob) -> tuple[Path, datetime]:
        """Wait the capture's duration (less when the job is cancelled: its deadline, or the
        service stopping) and write the trace since the last rotation."""
        with self._lock:
            try:
                if not self.running:
                    self._start()  # the job may have come back since the last try
                job.cancel.wait(job.options.duration_ms / 1000)
                empty, xspace, began = self.snapshot()
            except grpc.RpcError as exc:
                self.running = False
                raise _failure(self.address, exc) from None
        if empty or not xspace:
            raise CaptureFailed(
                SnapshotErrorCode.NO_TRACE_EVENTS,
                f"the profiler server at {self.address} traced no event in its continuous session",
            )
        run = job.logdir / "plugins" / "profile" / job.snapshot_id
        run.mkdir(parents=True, exist_ok=True)
        path = run / f"{self.address.replace(':', '_')}.xplane.pb"
        path.write_bytes(xspace)
        return path, datetime.fromtimestamp(began, UTC)


def _failure(address: str, exc: grpc.RpcError) -> CaptureFailed:
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return CaptureFailed(
            SnapshotErrorCode.TARGET_UNREACHABLE,
            f"profiler server unreachable at {address} ({exc.details()}); does the job call "
            "tf.profiler.experimental.server.start(PORT)?",
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return CaptureFailed(
            SnapshotErrorCode.CAPTURE_FAILED,
            f"the profiler server at {address} has no continuous profiling (TensorFlow 2.21 or "
            "later has it); unset PROFILER_LOOKBACK_TRACE_S for this job",
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CaptureFailed(
            SnapshotErrorCode.TARGET_TIMEOUT,
            f"the profiler server at {address} did not answer in time",
        )
    return CaptureFailed(
        SnapshotErrorCode.CAPTURE_FAILED, f"{address}: {code.name}: {exc.details()}"
    )


class ContinuousCapturer:
    """Captures single-worker targets from their look-back session; others as `fallback` does."""

    applies_tracer_levels = True

    def __init__(self, settings: CaptureSettings, rotate_s: float, fallback: Any):
        """`rotate_s`: PROFILER_LOOKBACK_TRACE_S, how much trace a session keeps."""
        self.settings = settings
        self.fallback = fallback
        self.sessions = {
            t.name: ContinuousSession(t.workers[0], settings, rotate_s)
            for t in settings.targets
            if uses_lookback_trace(t)
        }
        self._jobs: dict[str, CaptureJob] = {}  # in flight, cancelled when the service stops

    def start(self) -> None:
        for session in self.sessions.values():
            session.start()

    def stop(self, timeout_s: float | None = None) -> None:
        for job in list(self._jobs.values()):
            job.cancel.set()
        for session in self.sessions.values():
            session.stop(timeout_s)

    def capture(self, job: CaptureJob) -> Captured:
        """The trace begins before the capture was asked for: it says when."""
        session = self.sessions.get(job.target.name)
        if session is None:
            return self.fallback.capture(job)
        self._jobs[job.snapshot_id] = job
        try:
            _, began = session.capture(job)
        finally:
            self._jobs.pop(job.snapshot_id, None)
        return dataclasses.replace(collect_xplanes(job), trace_began=began)


def uses_lookback_trace(target: Target) -> bool:
    """A fixed single worker: discovery may move it, and several would need a session each."""
    return len(target.workers) == 1 and target.discover is None
