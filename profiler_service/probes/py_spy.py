"""The job's Python stacks from the sidecar: `py-spy record` against the job's process while a
trace runs, written beside the trace as the agent's sampler writes them (python_stacks.py).

py-spy reads another process's memory, so the sidecar must see the job's process (the pod shares
its process namespace: `shareProcessNamespace: true`) and may trace it (`SYS_PTRACE`, or root
on a host without Yama's restrictions). It runs `--nonblocking` (it never pauses the job: a
sample can be torn, never costly) and `--idle` (wall-clock samples, as the agent's sampler).

The job's process is the one listening on the profiler server's port (`/proc/net/tcp` gives the
socket, the processes' `/proc/<pid>/fd` who holds it), or the pid a setting names. Where py-spy
cannot run, `python.samples.json` says why and how to allow it, and no stacks are stored.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from profiler_service.probes.python_stacks import SAMPLES_FILE, STACKS_FILE

__all__ = ["ALLOW", "PySpyRecording", "listening_pid", "py_spy_path", "start_recording"]

log = logging.getLogger(__name__)

ALLOW = (
    "let the sidecar see and trace the job's process: the pod's `shareProcessNamespace: true` "
    "and the sidecar's `SYS_PTRACE` capability (the Helm chart's `sidecar.pySpy.enabled`), "
    "then PROFILER_PY_SPY=true"
)
_LOCAL = {"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0", ""}
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
_PY_SPY_THREAD = re.compile(r"^thread \((?P<tid>\d+)\)(?:: (?P<name>.*))?$")
_STOP_S = 10.0  # py-spy writes its file within this after SIGINT


def py_spy_path() -> str | None:
    """py-spy beside this Python (the sidecar's environment), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def listening_pid(port: int, proc: Path = Path("/proc")) -> int | None:
    """The process in this network namespace listening on TCP `port`; None where none is seen
    (no such socket, or its holder's descriptors are not ours to read)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and _port(fields[1]) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(entry.name)
        except OSError:
            continue
    return None


def _port(address: str) -> int:
    """The port of /proc/net/tcp's `0100007F:177A`."""
    return int(address.rsplit(":", 1)[1], 16)


@dataclass
class PySpyRecording:
    """One `py-spy record` running beside a trace; `finish` writes its stacks (or why none)."""

    proc: subprocess.Popen | None
    raw: Path | None
    pid: int | None
    hz: float
    unavailable: str | None = None

    def finish(self, run_dir: Path) -> list[Path]:
        """Stop py-spy and write `python.stacks.folded` and `python.samples.json` into `run_dir`;
        where it could not sample, only the latter, saying why."""
        reason = self.unavailable or self._stop()
        samples = run_dir / SAMPLES_FILE
        meta = {"source": "py-spy", "pid": self.pid, "hz": self.hz}
        if reason is not None:
            samples.write_text(json.dumps({**meta, "unavailable": reason}))
            return [samples]
        assert self.raw is not None
        folded = run_dir / STACKS_FILE
        folded.write_text(_threads_named(self.raw.read_text(errors="replace")))
        self.raw.unlink(missing_ok=True)
        samples.write_text(json.dumps(meta))
        return [folded, samples]

    def abandon(self) -> None:
        """The trace failed: stop py-spy, keep nothing."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.raw is not None:
            self.raw.unlink(missing_ok=True)

    def _stop(self) -> str | None:
        """Why py-spy gave no stacks; None where it wrote them."""
        assert self.proc is not None and self.raw is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        try:
            _, err = self.proc.communicate(timeout=_STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if self.raw.is_file() and self.raw.stat().st_size:
            return None
        return f"py-spy could not sample process {self.pid}: {_first_error(err)}; {ALLOW}"


def start_recording(
    hz: float, workers: list[str], pid: int | None, scratch: Path
) -> PySpyRecording:
    """Start py-spy against the job (the pid given, else the local worker's listener)."""
    binary = py_spy_path()
    if binary is None:
        why = "py-spy is not installed beside the sidecar (the `sidecar` extra installs it)"
        return PySpyRecording(None, None, None, hz, unavailable=why)
    if pid is None:
        pid, why = _job_pid(workers)
        if pid is None:
            return PySpyRecording(None, None, None, hz, unavailable=why)
    scratch.mkdir(parents=True, exist_ok=True)
    raw = scratch / f".py-spy-{os.getpid()}-{pid}.raw"
    command = [
        binary, "record", "--pid", str(pid), "--rate", str(max(1, round(hz))), "--format",
        "raw", "--output", str(raw), "--threads", "--idle", "--full-filenames", "--nonblocking",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return PySpyRecording(proc, raw, pid, hz)


def _job_pid(workers: list[str]) -> tuple[int | None, str]:
    local = [w for w in workers if w.rpartition(":")[0] in _LOCAL]
    if not local:
        return None, (
            f"the job's profiler server ({', '.join(workers)}) is not on this host: py-spy "
            "samples a process the sidecar sees (set PROFILER_PY_SPY_PID where it does)"
        )
    port = int(local[0].rpartition(":")[2])
    pid = listening_pid(port)
    if pid is None:
        return None, (
            f"no process the sidecar may read listens on port {port}: {ALLOW} (or set "
            "PROFILER_PY_SPY_PID)"
        )
    return pid, ""


def _threads_named(raw: str) -> str:
    """py-spy's `thread (123): MainThread;...` as the agent's `MainThread (tid 123);...`."""
    lines = []
    for line in raw.splitlines():
        head, sep, rest = line.partition(";")
        m = _PY_SPY_THREAD.match(head)
        if m and sep:
            line = f"{m['name'] or 'thread'} (tid {m['tid']});{rest}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _first_error(stderr: bytes | None) -> str:
    text = (stderr or b"").decode(errors="replace")
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("py-spy>"):
            return line.removeprefix("Error: ")
    return "it wrote no samples"
