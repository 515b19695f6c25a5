"""In-process capture for the embedded agent: TensorFlow's profiler in this very process, with the
process's Python stacks sampled while it traces (probes/python_stacks.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading

from profiler_service.capture.capturer import Captured, CaptureFailed, CaptureJob, collect_xplanes
from profiler_service.errors import SnapshotErrorCode
from profiler_service.probes.python_stacks import DEFAULT_HZ, StackSampler

log = logging.getLogger(__name__)


class InProcessCapturer:
    # TF 2.21's start() logs "host_tracer_level expects an i value." and uses its defaults.
    applies_tracer_levels = False

    def __init__(self, python_stacks_hz: float = DEFAULT_HZ) -> None:
        self._jobs: dict[str, CaptureJob] = {}  # in flight, by snapshot id
        self.python_stacks_hz = python_stacks_hz  # 0: no stacks

    def cancel(self) -> None:
        """End a running capture early (service shutdown); what was traced is still saved."""
        for job in list(self._jobs.values()):
            job.cancel.set()

    def capture(self, job: CaptureJob) -> Captured:
        import tensorflow as tf

        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=job.options.host_tracer_level,
            python_tracer_level=job.options.python_tracer_level,
            device_tracer_level=job.options.device_tracer_level,
        )
        try:
            tf.profiler.experimental.start(str(job.logdir), options=options)
        except tf.errors.AlreadyExistsError:
            raise CaptureFailed(
                SnapshotErrorCode.PROFILER_BUSY,
                "another profiler session is running in this process (TensorFlow allows one at a "
                "time; a profiler server or a manual tf.profiler call may hold it); retry later",
            ) from None
        except Exception as exc:
            raise CaptureFailed(
                SnapshotErrorCode.CAPTURE_FAILED, f"TensorFlow's profiler did not start: {exc}"
            ) from exc
        self._jobs[job.snapshot_id] = job
        sampler = StackSampler(self.python_stacks_hz) if self.python_stacks_hz > 0 else None
        if sampler is not None:
            sampler.start()
        try:
            job.cancel.wait(job.options.duration_ms / 1000)
        finally:
            if sampler is not None:
                sampler.stop()
            self._jobs.pop(job.snapshot_id, None)
            _lower_this_thread()
            try:
                tf.profiler.experimental.stop()
            except Exception as exc:
                raise CaptureFailed(
                    SnapshotErrorCode.CAPTURE_FAILED,
                    f"TensorFlow's profiler could not save the capture: {exc}",
                ) from exc
        captured = collect_xplanes(job)
        if sampler is None:
            return captured
        try:
            stacks = sampler.write(captured.paths[0].parent)
        except OSError as exc:  # the trace is still a capture
            log.warning("the Python stacks of %s were not written: %s", job.snapshot_id, exc)
            return captured
        return dataclasses.replace(captured, side_files=stacks)


COLLECTION_NICE = 10


def _lower_this_thread() -> None:
    """TensorFlow collects and writes the trace on the thread that stops it, beside the job's own
    threads. Linux gives each thread its own nice value, so this one (a thread per capture, see
    pipeline._with_deadline; it cannot be raised back without privileges) yields the CPU to
    the training steps and collects when they leave it some."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + COLLECTION_NICE)
