"""Remote capture through XProf's capture client, in a child process.

The child keeps TensorFlow out of the sidecar, lets a hung trace be killed at its deadline, and
gives us the C++ log on stderr, the only place that says why a capture failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from profiler_service.capture.capturer import CaptureFailed, CaptureJob, collect_xplanes
from profiler_service.capture.failures import classify_remote_failure

RESULT_MARKER = "PROFILER_SERVICE_RESULT "


class RemoteCapturer:
    applies_tracer_levels = True

    def capture(self, job: CaptureJob) -> list[Path]:
        request = {
            # Comma-separated: the client profiles every worker at once, each writing its own
            # <host>_<port>.xplane.pb. (worker_list asks service_addr to fan out, which only
            # TPU-style profiler services implement: TF's answers UNIMPLEMENTED.)
            "service_addr": ",".join(job.target.workers),
            "logdir": str(job.logdir),
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
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "profiler_service.capture.remote_child",
                json.dumps(request),
                str(os.getpid()),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=job.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise CaptureFailed(
                "capture_timeout",
                f"the capture from {', '.join(job.target.workers)} did not finish within "
                f"{job.timeout_s:g} s (duration + grace) and was stopped",
            ) from None
        result = _parse_result(stdout)
        if not result.get("ok"):
            raise classify_remote_failure(
                ", ".join(job.target.workers),
                result.get("error", f"exit status {proc.returncode}"),
                stderr,
            )
        return collect_xplanes(job)


def _parse_result(stdout: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    return {"ok": False}
