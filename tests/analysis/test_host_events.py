"""The capture's host events read without TensorFlow: tf.function calls (traced or not) and their
cost, XLA compilations and theirs, iterator stats and allocations per step by op, from an XSpace
that TensorFlow's own `xplane_pb2` serialised."""

from __future__ import annotations

from pathlib import Path

from tensorflow.tsl.profiler.protobuf import xplane_pb2

from profiler_service.analysis.readers.host_events import enclosing, read_host_events
from profiler_service.analysis.readers.step_allocations import allocations_by_op
from profiler_service.analysis.readers.tf_functions import function_name, summarise_tf_functions

MS = 1_000_000_000  # picoseconds


class Plane:
    """A host plane built event by event: names and stats get their metadata on first use."""

    def __init__(self) -> None:
        self.space = xplane_pb2.XSpace()
        self.plane = self.space.planes.add(name="/host:CPU")
        self.lines = [self.plane.lines.add(timestamp_ns=1_000) for _ in range(2)]
        self.events: dict[str, int] = {}
        self.stats: dict[str, int] = {}

    def _id(self, table: dict[str, int], metadata, name: str) -> int:
        if name not in table:
            table[name] = len(table) + 1
            metadata[table[name]].id, metadata[table[name]].name = table[name], name
        return table[name]

    def event(self, event_name: str, start_ms: float, ms: float, line: int = 0, **stats) -> None:
        e = self.lines[line].events.add(
            metadata_id=self._id(self.events, self.plane.event_metadata, event_name),
            offset_ps=round(start_ms * MS),
            duration_ps=round(ms * MS),
        )
        for key, value in stats.items():
            stat = e.stats.add(metadata_id=self._id(self.stats, self.plane.stat_metadata, key))
            if isinstance(value, str):
                stat.ref_value = self._id(self.stats, self.plane.stat_metadata, value)
            else:
                stat.int64_value = value

    def write(self, path: Path) -> Path:
        path.write_bytes(self.space.SerializeToString())
        return path


def test_traced_calls_cost_their_time_outside_the_kernels_and_compiles_are_timed(tmp_path):
    p = Plane()
    # Call 1: traced (graph building 6 ms, then 2 ms running); a function called inside it
    # while it traced is not a call of its own.
    p.event("step_fn", 0, 10, tf_function_call="traced-nonXla", tracing_count=5)
    p.event("tf.function-graph_building", 0.5, 6)
    p.event("inner_fn", 1, 1, tf_function_call="traced-nonXla", tracing_count=1)
    p.event("EagerKernelExecute", 7.5, 2)
    # Call 2: not traced, 1 ms of which 0.8 running.
    p.event("step_fn", 20, 1, tf_function_call="notTraced-nonXla", tracing_count=5)
    p.event("EagerKernelExecute", 20.1, 0.8)
    # Call 3: an XLA function traced and compiled: the compiled op starts at 32, the
    # backend ends at 32 + 40; then it runs 1 ms.
    p.event("xla_fn", 30, 45, tf_function_call="traced-xla", tracing_count=2)
    p.event("EagerKernelExecute", 31, 43)
    p.event("__inference_xla_fn_77:__inference_xla_fn_77", 32, 42)
    p.event("HLO passes through layout assignment", 33, 2)
    p.event("CpuCompiler::RunBackend", 40, 32)
    # Call 4: not traced (one trace for all shapes), but a new shape compiled: 10 ms of 20.
    p.event("xla_fn", 80, 20, tf_function_call="notTraced-xla", tracing_count=2)
    p.event("EagerKernelExecute", 80.5, 19)
    p.event("__inference_xla_fn_77:__inference_xla_fn_77", 81, 18)
    p.event("CpuCompiler::RunBackend", 85, 6)
    # Call 5: neither traced nor compiled: what every call costs with one shape.
    p.event("xla_fn", 110, 2, tf_function_call="notTraced-xla", tracing_count=2)
    p.event("EagerKernelExecute", 110.2, 1.6)
    # An unrelated event on another thread, inside call 1's time.
    p.event("EagerKernelExecute", 1, 5, line=1)
    events = read_host_events(p.write(tmp_path / "host.xplane.pb"))
    assert len(events.calls) == 6 and len(events.compiles) == 2
    functions = summarise_tf_functions(events, "host")
    assert functions is not None and functions.span_ms == 112.0
    by_name = {f.name: f for f in functions.functions}
    assert set(by_name) == {"step_fn", "xla_fn"}, "inner_fn ran inside step_fn's tracing"
    step = by_name["step_fn"]
    assert (step.calls, step.traces, step.traced_in_all, step.jit_compile) == (2, 1, 5, False)
    assert step.tracing_ms == 8.0  # 10 ms call - 2 ms running; the other thread's not counted
    assert (step.calls_ms, step.steady_call_ms) == (11.0, 1.0)
    xla = by_name["xla_fn"]
    assert (xla.calls, xla.traces, xla.compiles, xla.jit_compile) == (3, 1, 2, True)
    assert xla.tracing_ms == 2.0  # 45 - 43
    assert xla.compile_ms == 50.0  # 32 -> 72: conversion, HLO passes and the backend; 81 -> 91
    assert xla.calls_ms == 67.0
    assert xla.untraced_call_ms == 11.0, "one call that compiled, one that did not"
    assert xla.steady_call_ms == 2.0, "only the call that neither traced nor compiled"
    assert functions.functions[0].name == "xla_fn", "the costliest first"


def test_a_capture_without_calls_or_compiles_has_no_function_summary(tmp_path):
    p = Plane()
    p.event("train", 0, 10, step_num=1, _r=1)
    p.event("EagerKernelExecute", 1, 5)
    events = read_host_events(p.write(tmp_path / "host.xplane.pb"))
    assert [s.stats["step_num"] for s in events.steps] == [1]
    assert summarise_tf_functions(events, "host") is None


def test_compiles_outside_any_call_are_named_after_the_compiled_function():
    assert function_name("__inference_train_step_123:__inference_train_step_123") == ("train_step")
    assert function_name("cluster_0:_XlaCompile") == "cluster_0"


def test_enclosing_finds_the_innermost_holder_on_the_same_line(tmp_path):
    p = Plane()
    p.event("outer", 0, 10, tf_function_call="notTraced-nonXla")
    p.event("inner", 1, 5, tf_function_call="notTraced-nonXla")
    p.event("EagerKernelExecute", 2, 1)
    p.event("EagerKernelExecute", 7, 2)
    p.event("EagerKernelExecute", 12, 1)
    p.event("EagerKernelExecute", 2, 1, line=1)
    events = read_host_events(p.write(tmp_path / "host.xplane.pb"))
    holders = enclosing(events.calls, events.kernel_executions)
    by_start = {
        (k.line, k.start_ps // MS): h and h.name
        for k, h in zip(events.kernel_executions, holders, strict=True)
    }
    assert by_start == {(0, 2): "inner", (0, 7): "outer", (0, 12): None, (1, 2): None}


def test_iterator_stats_are_kept_once_per_stage(tmp_path):
    p = Plane()
    for i in range(3):
        p.event(f"Iterator::Root::Interleave[{i}]::Map", i, 1, parallelism=1, name="MapDataset:1")
    events = read_host_events(p.write(tmp_path / "host.xplane.pb"))
    assert events.iterators == {
        "Iterator::Root::Interleave::Map": {"parallelism": 1, "name": "MapDataset:1"}
    }


def test_allocations_by_op_per_step_and_their_most_alive_at_once(tmp_path):
    p = Plane()
    mib = 2**20
    for step in range(4):
        t = step * 10
        p.event("train", t, 9, step_num=step, _r=1)
        # Two stack outputs alive together, then freed; one small add.
        for k, addr in enumerate((1, 2)):
            p.event(
                "MemoryAllocation",
                t + 1 + k,
                0,
                allocator_name="mklcpu",
                addr=addr,
                allocation_bytes=8 * mib,
                tf_op="stack",
                shape="[2,1024,1024]",
            )
        p.event(
            "MemoryAllocation",
            t + 3,
            0,
            allocator_name="mklcpu",
            addr=3,
            allocation_bytes=mib,
            tf_op="add",
            shape="[256,1024]",
        )
        for addr in (1, 2, 3):
            p.event(
                "MemoryDeallocation",
                t + 5,
                0,
                allocator_name="mklcpu",
                addr=addr,
                allocation_bytes=0,
            )
        # Another allocator's events are not read.
        p.event(
            "MemoryAllocation",
            t + 4,
            0,
            allocator_name="GPU_0_bfc",
            addr=9,
            allocation_bytes=99 * mib,
            tf_op="big",
            shape="[1]",
        )
    events = read_host_events(p.write(tmp_path / "host.xplane.pb"), memory_allocator="mklcpu")
    stack, add = allocations_by_op(events)
    assert (stack.op_name, stack.bytes_per_step, stack.count_per_step) == ("stack", 16 * mib, 2)
    assert stack.peak_alive_bytes == 16 * mib and stack.shapes == ["[2,1024,1024]"]
    assert (add.op_name, add.bytes_per_step, add.peak_alive_bytes) == ("add", mib, mib)
    assert read_host_events(tmp_path / "host.xplane.pb").memory == [], "read only when asked"


def test_traces_and_compiles_per_step_count_only_those_inside_marked_steps(tmp_path):
    """Calls cut by the capture's edges fall outside XProf's steps: they are not counted per
    step (a 2 s capture of 130 ms steps read 1.29 compiles per step before this)."""
    p = Plane()
    p.event("f", 0, 2, tf_function_call="traced-xla", tracing_count=1)  # before the first step
    p.event("CpuCompiler::RunBackend", 0.5, 1)
    for step in range(3):
        t = 10 + step * 10
        p.event("train", t, 9, step_num=step, _r=1)
        p.event("f", t + 1, 5, tf_function_call="traced-xla", tracing_count=2 + step)
        p.event("CpuCompiler::RunBackend", t + 2, 1)
    events = read_host_events(p.write(tmp_path / "host.xplane.pb"))
    [f] = summarise_tf_functions(events, "host").functions
    assert (f.traces, f.compiles) == (4, 4)
    assert (f.traces_per_step, f.compiles_per_step) == (1.0, 1.0)


def test_a_compile_on_an_executor_thread_is_named_by_its_xla_module(tmp_path):
    """Keras's `jit_compile` train step: the compile runs inside an asynchronous op on a
    `tf_Compute` thread, in no tf.function call; the backend's event names the module."""
    p = Plane()
    p.event("multi_step_on_iterator", 0, 460, tf_function_call="notTraced-nonXla")
    p.event("ExecutorState::ProcessAsync::Start", 1, 455, line=1, name="StatefulPartitionedCall")
    p.event("HLO passes through layout assignment", 76, 4, line=1)
    p.event("CpuCompiler::RunBackend", 82, 355, line=1, name="a_inference_one_step_on_data_872__.6")
    events = read_host_events(p.write(tmp_path / "host.xplane.pb"))
    by_name = {f.name: f for f in summarise_tf_functions(events, "host").functions}
    compiled = by_name["one_step_on_data"]
    assert (compiled.compiles, compiled.compile_ms, compiled.calls) == (1, 436.0, 0)
    assert by_name["multi_step_on_iterator"].compiles == 0
