"""TensorFlow's memory probe, polled as the agent's look-back sampler polls it, in a job that
starts the agent before `import tensorflow` (as the README says): it must neither race the
import nor start TensorFlow's runtime under the job, which could then no longer configure its
devices. Real TensorFlow, in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

JOB = """
import json, threading, time
from profiler_service.probes.tf_memory import TFMemoryProbe
probe, errors, readings, stop = TFMemoryProbe(), [], [], threading.Event()
def poll():
    while not stop.is_set():
        try:
            readings.append(probe.read())
        except Exception as exc:
            errors.append(repr(exc))
        time.sleep(0.001)
poller = threading.Thread(target=poll, daemon=True)
poller.start()
import tensorflow as tf
time.sleep(0.3)  # the job's own set-up, after its import: the probe polls on
try:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    configured = "ok"
except RuntimeError as exc:
    configured = str(exc)
before_any_op = readings[-1]
tf.constant([1.0]) + 1  # the job's first op starts the runtime
time.sleep(0.3)
stop.set()
poller.join()
print(json.dumps({"configured": configured, "errors": errors[:3],
                  "before_any_op": before_any_op, "after": readings[-1]}))
"""


@pytest.mark.e2e
def test_an_agent_started_before_tensorflow_lets_the_job_configure_its_devices():
    out = subprocess.run(
        [sys.executable, "-c", JOB],
        capture_output=True,
        text=True,
        timeout=180,
        # The BFC allocator keeps statistics on the CPU too, so the probe has something to read.
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_CPU_ALLOCATOR_USE_BFC": "true"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # It read nothing while the job imported and configured TensorFlow ...
    assert got["configured"] == "ok" and got["errors"] == [] and got["before_any_op"] == []
    # ... and reads once the job has started the runtime itself: both logical CPUs it set up.
    assert sorted(device for device, *_ in got["after"]) == ["CPU:0", "CPU:1"]
