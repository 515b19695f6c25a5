"""A sidecar's capture with the job's Python stacks: py-spy samples the job's process while the
trace runs (probes/py_spy.py), whichever capturer takes the trace (a one-off remote session or
the look-back trace), so findings name the user's code through the sidecar as through the agent.
"""

from __future__ import annotations

import dataclasses
import logging

from profiler_service.capture.capturer import Captured, CaptureJob, Capturer
from profiler_service.probes.py_spy import start_recording

log = logging.getLogger(__name__)


class PySpyCapturer:
    """`inner`'s capture, with py-spy's stacks (or why there are none) stored beside it where
    py-spy is on."""

    def __init__(self, inner: Capturer, enabled: bool, hz: float, pid: int | None = None):
        self.inner = inner
        self.enabled = enabled
        self.hz = hz
        self.pid = pid

    @property
    def applies_tracer_levels(self) -> bool:
        return self.inner.applies_tracer_levels

    def capture(self, job: CaptureJob) -> Captured:
        if not self.enabled or self.hz <= 0:
            return self.inner.capture(job)  # off: nothing beside the trace (docs say how)
        recording = start_recording(self.hz, job.target.workers, self.pid, job.logdir / ".py-spy")
        try:
            captured = self.inner.capture(job)
        except BaseException:
            recording.abandon()
            raise
        try:
            files = recording.finish(captured.paths[0].parent)
        except OSError as exc:  # the trace is still a capture
            log.warning("the Python stacks of %s were not written: %s", job.snapshot_id, exc)
            return captured
        return dataclasses.replace(captured, side_files=[*captured.side_files, *files])
