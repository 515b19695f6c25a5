"""Which process answered a capture (capture/answered_by.py): the host name an XSpace carries,
read past its planes without parsing them, and the processes listening at an address."""

from __future__ import annotations

import os
import socket

from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F
from helpers import free_port

from profiler_service.capture.answered_by import capture_sources, listening_pids, xspace_hostnames
from profiler_service.models import SnapshotFile
from profiler_service.proto_subset import message_classes

# XSpace's fields as tensorflow/tsl/profiler/protobuf/xplane.proto numbers them.
CLASSES = message_classes(
    "test.answered_by",
    {
        "XSpace": [
            ("planes", 1, F.TYPE_MESSAGE, True, "XPlane"),
            ("errors", 2, F.TYPE_STRING, True, None),
            ("hostnames", 4, F.TYPE_STRING, True, None),
        ],
        "XPlane": [("id", 1, F.TYPE_INT64, False, None), ("name", 2, F.TYPE_STRING, False, None)],
    },
)


def xspace(tmp_path, hostnames: list[str], planes: int = 3, name: str = "127.0.0.1_6009.xplane.pb"):
    space = CLASSES["XSpace"]()
    for i in range(planes):
        space.planes.add(id=i, name="/host:CPU" + "x" * 100_000)  # bytes the reader skips
    space.errors.append("an error")
    space.hostnames.extend(hostnames)
    path = tmp_path / name
    path.write_bytes(space.SerializeToString())
    return path


def test_the_host_names_are_read_past_the_planes(tmp_path):
    assert xspace_hostnames(xspace(tmp_path, ["trainer-0"])) == ["trainer-0"]
    assert xspace_hostnames(xspace(tmp_path, [])) == []


def test_a_file_that_is_not_an_xspace_gives_no_host_name(tmp_path):
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(b"\x0a\xff\xff\x7f" + os.urandom(64))  # a plane longer than the file
    assert xspace_hostnames(path) == []
    path.write_bytes(b"")
    assert xspace_hostnames(path) == []


def test_the_listeners_of_a_port_are_this_host_s_processes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert listening_pids(port) == ([os.getpid()], 1)
    assert listening_pids(port) == ([], 0)


def test_the_agent_s_capture_came_from_its_own_process(tmp_path):
    path = xspace(tmp_path, ["vm"])
    files = [SnapshotFile(name=path.name, size_bytes=path.stat().st_size)]
    [source] = capture_sources(tmp_path, files, [], in_process=True)
    assert (source.file, source.hostname, source.pids) == (path.name, "vm", [os.getpid()])


def test_a_sidecar_s_capture_names_whoever_listened_at_the_worker_s_address(tmp_path):
    port = free_port()  # nothing listens there
    path = xspace(tmp_path, ["vm"], name=f"127.0.0.1_{port}.xplane.pb")
    files = [SnapshotFile(name=path.name, size_bytes=1), SnapshotFile(name="python.samples.json",
                                                                      size_bytes=1)]  # fmt: skip
    [source] = capture_sources(tmp_path, files, [f"127.0.0.1:{port}"], in_process=False)
    assert (source.address, source.hostname) == (f"127.0.0.1:{port}", "vm")
    assert source.pids == [] and f"nothing listens on port {port}" in (source.note or "")
    [remote] = capture_sources(tmp_path, files, [f"10.1.2.3:{port}"], in_process=False)
    assert "another host (10.1.2.3)" in (remote.note or "")
