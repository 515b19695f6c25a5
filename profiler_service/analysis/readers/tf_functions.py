"""How often each tf.function traced and XLA compiled during the capture, and what it cost.

Each call of a `tf.function` leaves an event named after the function with the mode TF ran it
in (`tf_function_call`: `traced-nonXla`, `notTraced-xla`, ...) and its running count of traces.
A traced call builds the graph (`tf.function-graph_building`) and instantiates a new concrete
function before running it: its cost is the call's time outside the kernel execution
(`EagerKernelExecute`) inside it. XLA compiles inside that execution, on the first run of each
new shape: from the compiled op's start (the function's own op on the calling thread, or, in
Keras's `jit_compile` step, an asynchronous op on an executor thread) to the end of the
compiler's backend (`CpuCompiler::RunBackend`, `GpuCompiler::RunBackend`), a span no other event
marks; the backend's event names the XLA module, hence the function. A call that neither
traced nor compiled (none of its function's compiles started during it) is steady: what every
call costs once the function keeps one trace and one shape. Warm-up traces before the capture
are not in it, so a job that traced once before is silent here.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable

from profiler_service.analysis.models import TfFunctionCalls, TfFunctions
from profiler_service.analysis.readers.host_events import HostEvents, Span, enclosing

_CONCRETE = re.compile(r"^__inference_(?P<name>.+?)_\d+(?::|$)")
# XLA's module: `a_inference_one_step_on_data_872__.6`, `a_inference_step_fn_84__XlaMustCompile...`
_MODULE = re.compile(r"_inference_(?P<name>.+?)_\d+__")
MAX_FUNCTIONS = 5


def _ms(ps: float) -> float:
    return round(ps / 1e9, 3)


def _mean_ms(durations_ps: list[int]) -> float | None:
    return _ms(sum(durations_ps) / len(durations_ps)) if durations_ps else None


def function_name(op_name: str) -> str:
    """`__inference_train_step_123:__inference_train_step_123` -> `train_step`;
    `cluster_0:_XlaCompile` -> `cluster_0`."""
    match = _CONCRETE.match(op_name)
    return match["name"] if match else op_name.split(":", 1)[0]


def summarise_tf_functions(events: HostEvents, host: str) -> TfFunctions | None:
    """Per function: calls, traces and their cost, XLA compilations and theirs; None when the
    capture has neither calls nor compilations."""
    if not events.calls and not events.compiles:
        return None
    parent_call = enclosing(events.calls, events.calls)
    top_calls = [c for c, parent in zip(events.calls, parent_call, strict=True) if parent is None]
    running_ps: dict[Span, int] = defaultdict(int)
    for kernel, call in zip(
        events.kernel_executions, enclosing(top_calls, events.kernel_executions), strict=True
    ):
        if call is not None:
            running_ps[call] += kernel.end_ps - kernel.start_ps
    functions: dict[str, TfFunctionCalls] = {}
    in_steps: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # traces, compiles
    inside_step = _inside_steps(events.steps)
    traced_ps: dict[str, list[int]] = defaultdict(list)  # each call's whole time
    untraced_ps: dict[str, list[int]] = defaultdict(list)
    untraced_run_ps: dict[str, list[int]] = defaultdict(list)  # of those, running the graph

    def record(name: str) -> TfFunctionCalls:
        if name not in functions:
            functions[name] = TfFunctionCalls(name=name, calls=0, traces=0, tracing_ms=0.0)
        return functions[name]

    untraced: list[Span] = []
    for call in top_calls:
        mode = str(call.stats.get("tf_function_call", ""))
        f = record(call.name)
        f.calls += 1
        f.calls_ms = round(f.calls_ms + _ms(call.end_ps - call.start_ps), 3)
        f.jit_compile = f.jit_compile or mode.endswith("-xla")
        count = call.stats.get("tracing_count")
        if isinstance(count, int) and count:
            f.traced_in_all = count
        if not mode.startswith("traced"):
            untraced.append(call)
            untraced_ps[call.name].append(call.end_ps - call.start_ps)
            untraced_run_ps[call.name].append(running_ps[call])
        else:
            traced_ps[call.name].append(call.end_ps - call.start_ps)
            f.traces += 1
            in_steps[call.name][0] += inside_step(call)
            tracing_ps = max(0, call.end_ps - call.start_ps - running_ps[call])
            f.tracing_ms = round(f.tracing_ms + _ms(tracing_ps), 3)
    compiled_in = enclosing(events.compiled_ops, events.compiles)
    called_in = enclosing(top_calls, events.compiles)
    during = _calls_during(top_calls)
    compiling: set[Span] = set()  # calls during which their function compiled
    previous_end: dict[Span, int] = {}
    for compile_span, op, call in zip(events.compiles, compiled_in, called_in, strict=True):
        start = compile_span.start_ps
        if op is not None:  # the op's first run: conversion, HLO passes, then the backend
            start = max(op.start_ps, previous_end.get(op, op.start_ps))
            previous_end[op] = compile_span.end_ps
        module = _MODULE.search(str(compile_span.stats.get("name", "")))
        if module:
            name = module["name"]
        elif call is not None:
            name = call.name
        else:
            name = function_name(op.name if op else "unknown")
        f = record(name)
        f.jit_compile = True
        f.compiles += 1
        compiled_during = call if call is not None else during(name, compile_span.start_ps)
        if compiled_during is not None:
            compiling.add(compiled_during)
        in_steps[name][1] += inside_step(compile_span)
        f.compile_ms = round(f.compile_ms + _ms(compile_span.end_ps - start), 3)
    steady_ps: dict[str, list[int]] = defaultdict(list)
    for call in untraced:
        if call not in compiling:
            steady_ps[call.name].append(call.end_ps - call.start_ps)
    for name, f in functions.items():
        f.steady_call_ms = _mean_ms(steady_ps[name])
        f.traced_call_ms = _mean_ms(traced_ps[name])
        f.untraced_call_ms = _mean_ms(untraced_ps[name])
        f.untraced_run_ms = _mean_ms(untraced_run_ps[name])
    if events.steps:
        for name, f in functions.items():
            traces, compiles = in_steps[name]
            f.traces_per_step = round(traces / len(events.steps), 3)
            f.compiles_per_step = round(compiles / len(events.steps), 3)
    ranked = sorted(
        functions.values(), key=lambda f: (-(f.tracing_ms + f.compile_ms), -f.calls, f.name)
    )
    return TfFunctions(host=host, span_ms=_ms(events.span_ps), functions=ranked[:MAX_FUNCTIONS])


def _calls_during(calls: list[Span]) -> Callable[[str, int], Span | None]:
    """The call of a function running at a time, on any thread: Keras compiles its step on an
    executor thread, outside the call's own events."""
    by_name: dict[str, list[Span]] = defaultdict(list)
    for call in sorted(calls, key=lambda c: c.start_ps):
        by_name[call.name].append(call)
    starts = {name: [c.start_ps for c in spans] for name, spans in by_name.items()}

    def during(name: str, at_ps: int) -> Span | None:
        i = bisect_right(starts.get(name, []), at_ps) - 1
        if i < 0:
            return None
        call = by_name[name][i]
        return call if at_ps <= call.end_ps else None

    return during


def _inside_steps(steps: list[Span]) -> Callable[[Span], int]:
    """Whether an event starts inside a marked step (steps sorted by start)."""
    starts = [s.start_ps for s in steps]

    def inside(span: Span) -> int:
        i = bisect_right(starts, span.start_ps) - 1
        return int(i >= 0 and span.start_ps <= steps[i].end_ps)

    return inside
