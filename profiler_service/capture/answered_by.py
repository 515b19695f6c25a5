"""Which process answered a capture: a target names an address (`127.0.0.1:6009`), and two
jobs can listen on one port (gRPC's profiler server sets SO_REUSEPORT), so a snapshot records,
per capture file, the host name the job's profiler wrote into it (`XSpace.hostnames`: the
machine or pod) and the processes this service saw listening at its address: its own pid for
the agent; for a sidecar, the job's pid where it shares the job's PID namespace, and every
listener where several share the port (any of them may have answered: the note says so).

The XSpace's host names are read from its top level without parsing its planes, so a 2 GB
capture costs a few seeks.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from pathlib import Path

import psutil

from profiler_service.models import CaptureSource, SnapshotFile

__all__ = ["capture_sources", "listening_pids", "xspace_hostnames"]

_HOSTNAMES_FIELD = 4  # tensorflow/tsl/profiler/protobuf/xplane.proto: repeated string hostnames
_MAX_HOSTNAMES = 16


def xspace_hostnames(path: Path) -> list[str]:
    """`XSpace.hostnames` of one `.xplane.pb`, its planes skipped by their lengths ([] where
    the file is not an XSpace or holds none)."""
    names: list[str] = []
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            while f.tell() < size and len(names) < _MAX_HOSTNAMES:
                field, wire = divmod(_varint(f), 8)
                if wire == 2:
                    length = _varint(f)
                    if field == _HOSTNAMES_FIELD:
                        names.append(f.read(length).decode("utf-8", "replace"))
                    else:
                        f.seek(length, os.SEEK_CUR)
                elif wire == 0:
                    _varint(f)
                elif wire in (1, 5):
                    f.seek(8 if wire == 1 else 4, os.SEEK_CUR)
                else:
                    break  # not a field of an XSpace: what was read so far stands
    except (OSError, ValueError):
        return names
    return names


def _varint(f) -> int:
    value, shift = 0, 0
    while True:
        byte = f.read(1)
        if not byte:
            raise ValueError("truncated varint")
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def listening_pids(port: int) -> tuple[list[int], int]:
    """The pids listening on TCP `port` on this host that this process can see, and how many
    listeners there are (a listener in a process it cannot see has no pid)."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return [], 0
    listeners = [
        c
        for c in connections
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
    ]
    return sorted({c.pid for c in listeners if c.pid is not None}), len(listeners)


def _is_local(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host in ("localhost", socket.gethostname())


def capture_sources(
    run_dir: Path, files: list[SnapshotFile], workers: list[str], *, in_process: bool
) -> list[CaptureSource]:
    """One entry per capture file: its host name and who listened at its worker's address."""
    sources = []
    for file in files:
        if not file.name.endswith(".xplane.pb"):
            continue
        hostnames = xspace_hostnames(run_dir / file.name)
        source = CaptureSource(file=file.name, hostname=hostnames[0] if hostnames else None)
        if in_process:
            source.pids = [os.getpid()]
        else:
            _listeners(source, _worker_of(file.name, workers))
        sources.append(source)
    return sources


def _worker_of(name: str, workers: list[str]) -> str | None:
    """The worker address a remote capture's file is named after (`<host>_<port>.xplane.pb`)."""
    stem = name.removesuffix(".xplane.pb")
    for worker in workers:
        host, _, port = worker.rpartition(":")
        if stem == f"{host}_{port}" or (len(workers) == 1 and stem.endswith(f"_{port}")):
            return worker
    return workers[0] if len(workers) == 1 else None


def _listeners(source: CaptureSource, worker: str | None) -> None:
    if worker is None:
        source.note = "no configured worker's address matches the file's name"
        return
    source.address = worker
    host, _, port = worker.rpartition(":")
    if not _is_local(host.strip("[]")) or not port.isdigit():
        source.note = f"the job listens on another host ({host}): its processes are not seen here"
        return
    pids, listeners = listening_pids(int(port))
    source.pids = pids
    if listeners > 1:
        source.note = (
            f"{listeners} processes listen on port {port} (SO_REUSEPORT): any of them may have "
            "answered; the host name is the one its profiler wrote"
        )
    elif listeners and not pids:
        source.note = (
            "the listening process is not visible from this service (another PID namespace: "
            "`shareProcessNamespace: true` shows it)"
        )
    elif not listeners:
        source.note = f"nothing listens on port {port} any more (the job exited?)"
