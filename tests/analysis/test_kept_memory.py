"""The capture's memory events, read without TensorFlow: the schema declared in xplane.py
against TensorFlow's own `xplane_pb2`, and kept allocations found in an XSpace it serialised."""

from __future__ import annotations

from pathlib import Path

from tensorflow.tsl.profiler.protobuf import xplane_pb2

from profiler_service.analysis.readers import xplane
from profiler_service.analysis.readers.kept_memory import kept_allocations_in_capture


def test_the_declared_fields_have_tensorflows_numbers_and_types():
    for message, fields in xplane.XPLANE_FIELDS.items():
        tf_message = xplane_pb2.DESCRIPTOR.message_types_by_name[message]
        for name, number, kind, repeated, _ in fields:
            tf_field = tf_message.fields_by_name[name]
            assert (tf_field.number, tf_field.type) == (number, kind), (message, name)
            assert tf_field.is_repeated == repeated, (message, name)


def write_capture(path: Path, steps: int, leak_every_step: bool) -> None:
    """A host plane with each step allocating an activation and a scratch tensor (freed), the
    activation freed too unless it leaks; also another allocator's events, to be ignored."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    for i, name in enumerate(("MemoryAllocation", "MemoryDeallocation"), start=1):
        plane.event_metadata[i].id, plane.event_metadata[i].name = i, name
    names = [
        "allocator_name",
        "addr",
        "allocation_bytes",
        "tf_op",
        "shape",
        "mklcpu",
        "GPU_0_bfc",
        "dense/Relu",
        "[32,256]",
        "scratch/RandomUniform",
        "[4,4]",
    ]
    ids = {n: i + 10 for i, n in enumerate(names)}
    for n, i in ids.items():
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, n
    line = plane.lines.add(timestamp_ns=1_000)

    def event(kind: int, t_ps: int, addr: int, size: int, op: str, shape: str, allocator="mklcpu"):
        e = line.events.add(metadata_id=kind, offset_ps=t_ps)
        e.stats.add(metadata_id=ids["allocator_name"], ref_value=ids[allocator])
        e.stats.add(metadata_id=ids["addr"], uint64_value=addr)
        e.stats.add(metadata_id=ids["allocation_bytes"], int64_value=size)
        e.stats.add(metadata_id=ids["tf_op"], ref_value=ids[op])
        e.stats.add(metadata_id=ids["shape"], ref_value=ids[shape])

    for step in range(steps):
        t = step * 10_000_000
        event(1, t + 1, 2 * step, 32 * 1024, "dense/Relu", "[32,256]")
        event(1, t + 2, 2 * step + 1, 64, "scratch/RandomUniform", "[4,4]")
        event(2, t + 3, 2 * step + 1, 64, "scratch/RandomUniform", "[4,4]")
        event(1, t + 4, 10_000 + step, 999, "dense/Relu", "[32,256]", allocator="GPU_0_bfc")
        if not leak_every_step:
            event(2, t + 5, 2 * step, 32 * 1024, "dense/Relu", "[32,256]")
    path.write_bytes(space.SerializeToString())


def test_activations_never_freed_are_kept_allocations(tmp_path):
    capture = tmp_path / "host.xplane.pb"
    write_capture(capture, steps=20, leak_every_step=True)
    [kept] = kept_allocations_in_capture(capture, "mklcpu")
    # Those made in the capture's first half (steps 0-9; later ones may still be in use).
    assert (kept.op_name, kept.shape, kept.count, kept.bytes) == (
        "dense/Relu",
        "[32,256]",
        10,
        10 * 32 * 1024,
    )
    assert kept.first_time_ms == 0.0


def test_a_job_that_frees_its_activations_keeps_nothing(tmp_path):
    capture = tmp_path / "host.xplane.pb"
    write_capture(capture, steps=20, leak_every_step=False)
    assert kept_allocations_in_capture(capture, "mklcpu") == []
    assert kept_allocations_in_capture(capture, "no-such-allocator") == []
