"""The sidecar's py-spy: which process it samples (the one listening on the profiler server's
port, found through /proc as the sidecar would in a pod sharing its process namespace), what it
writes, and why it wrote no stacks where it could not sample."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import free_port

from profiler_service.analysis.readers.python_stacks import read_python_stacks
from profiler_service.probes.py_spy import (
    ALLOW,
    PySpyRecording,
    _threads_named,
    listening_pid,
    start_recording,
)
from profiler_service.probes.python_stacks import SAMPLES_FILE, STACKS_FILE

LISTENER = """\
import socket, sys, time
s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); print('up', flush=True); time.sleep(60)
"""


def listen(host: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTENER, host, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "up"
    return proc


def test_the_job_is_the_process_listening_on_the_port_over_ipv4_and_ipv6():
    port4, port6 = free_port(), free_port()
    first, second = listen("127.0.0.1", port4), listen("::1", port6)
    try:
        assert listening_pid(port4) == first.pid
        assert listening_pid(port6) == second.pid
        assert listening_pid(free_port()) is None  # nobody listens there
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()


def test_py_spys_threads_read_as_the_agents():
    raw = (
        "thread (25481): MainThread;main (/app/train.py:40) 7\n"
        "thread (25616);FuncRegistry.__call__ (/venv/site-packages/tf/script_ops.py:279) 2\n"
    )
    assert _threads_named(raw) == (
        "MainThread (tid 25481);main (/app/train.py:40) 7\n"
        "thread (tid 25616);FuncRegistry.__call__ (/venv/site-packages/tf/script_ops.py:279) 2\n"
    )


def test_a_remote_job_or_one_nobody_listens_for_is_not_sampled_and_says_why(tmp_path):
    remote = start_recording(50, ["10.1.2.3:6009"], None, tmp_path)
    assert "not on this host" in remote.unavailable and "PROFILER_PY_SPY_PID" in remote.unavailable
    port = free_port()
    nobody = start_recording(50, [f"127.0.0.1:{port}"], None, tmp_path)
    assert f"listens on port {port}" in nobody.unavailable and ALLOW in nobody.unavailable
    assert nobody.proc is None and remote.proc is None


def test_a_process_that_is_not_python_gives_py_spys_own_reason(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        recording = start_recording(50, [], sleeper.pid, tmp_path / "scratch")
        assert isinstance(recording, PySpyRecording) and recording.proc is not None
        recording.proc.wait(timeout=30)  # a trace lasts longer than py-spy takes to give up
        files = recording.finish(tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert [f.name for f in files] == [SAMPLES_FILE]
    meta = json.loads((tmp_path / SAMPLES_FILE).read_text())
    assert meta["pid"] == sleeper.pid
    stacks = read_python_stacks(tmp_path)  # what the analysis reads: no samples, and why
    assert stacks.samples == 0 and stacks.source == "py-spy"
    assert stacks.unavailable == meta["unavailable"] and "SYS_PTRACE" in stacks.unavailable
    assert meta["unavailable"].startswith(f"py-spy could not sample process {sleeper.pid}: ")
    assert "python" in meta["unavailable"].lower()  # py-spy's own words: not a Python process
    assert not (tmp_path / STACKS_FILE).exists()
    assert list((tmp_path / "scratch").iterdir()) == []  # its scratch file is not left behind
