"""TensorFlow's own pathologies: tf.function retracing, XLA recompilation, step temporaries.

Read from the capture's own events (tf_functions.py, step_allocations.py), where XProf's tools
report nothing: on TF 2.21 CPU captures its overview gave `compile_time_ms_avg` 0.0 for steps
that spent 60 of 69 ms compiling, and no tf-function statement for a job retracing every step.
Each rule with its evidence, what its fix saves and its advice for JAX."""

from __future__ import annotations

from pydantic import Field

from profiler_service.analysis.findings.advice import Advice
from profiler_service.analysis.findings.impact import spread_about
from profiler_service.analysis.findings.memory import memory_saving
from profiler_service.analysis.findings.registry import rule
from profiler_service.analysis.models import (
    AllocatorMemory,
    Finding,
    Impact,
    Severity,
    Summary,
    TfFunctionCalls,
)
from profiler_service.analysis.readers.step_allocations import step_swing_bytes
from profiler_service.analysis.rule import Evidence, Rule


class RetracingEvidence(Evidence):
    """retracing: the tf.function traced most during the capture."""

    function: str = Field(description="the tf.function's name")
    traces: int = Field(description="its calls in the capture that traced it again")
    calls: int = Field(description="its calls in the capture")
    steps: int = Field(description="the steps the capture marked")
    traces_per_step: float | None = Field(description="traces per marked step, where marked")
    tracing_ms: float = Field(
        description="in those calls, the time not spent running it (graph building), in "
        "milliseconds"
    )
    tracing_share: float = Field(description="that time's share (0-1) of the capture")
    traced_in_all: int | None = Field(
        description="TF's own count of its traces, at its last call in the capture"
    )
    jit_compile: bool = Field(description="it is an XLA function (`jit_compile=True`)")
    traced_call_ms: float | None = Field(
        None, description="a call that traced, on average, in milliseconds"
    )
    untraced_call_ms: float | None = Field(
        None,
        description="a call that did not trace, on average, in milliseconds (none: every "
        "call traced)",
    )
    untraced_run_ms: float | None = Field(
        None, description="of that call, the time running the graph, in milliseconds"
    )


class XlaRecompilationEvidence(Evidence):
    """xla_recompilation: the function XLA compiled most during the capture."""

    function: str = Field(description="the function's name")
    compiles: int = Field(description="XLA compilations during its calls")
    compiles_per_step: float | None = Field(
        description="compilations per marked step, where marked"
    )
    compile_ms: float = Field(description="their time, in milliseconds")
    compile_ms_per_compile: float = Field(description="the mean time of one compilation")
    compile_share: float = Field(description="their share (0-1) of the capture")
    traces: int = Field(description="its calls that traced it again")
    tracing_share: float | None = Field(
        None,
        description="its calls' time tracing (graph building, beside the compiling), as a "
        "share (0-1) of the capture",
    )
    calls: int = Field(description="its calls in the capture")
    calls_share: float | None = Field(
        None, description="its calls' whole time, as a share (0-1) of the capture"
    )
    steady_share: float | None = Field(
        None,
        description="what its calls would take were each a call that neither traced nor "
        "compiled (their mean), as a share (0-1) of the capture; none where no call was",
    )
    xprof_compile_ms_avg: float = Field(
        description="XProf's compile time a step, for comparison (often 0.0 where it misses it)"
    )


class StepTemporariesOp(Evidence):
    """One op's allocations in a step (step_temporaries' `ops`)."""

    op: str = Field(description="the op")
    shapes: list[str] = Field(description="its largest allocations' shapes")
    bytes_per_step: float = Field(description="the bytes it allocates a step")
    count_per_step: float = Field(description="its allocations a step")
    peak_alive_bytes: int = Field(description="the most bytes of its allocations alive at one time")


class StepTemporariesEvidence(Evidence):
    """step_temporaries: memory allocated and freed inside every step, and by which ops."""

    allocator: str = Field(description="the allocator with the largest swing")
    swing_bytes: int = Field(
        description="how far its peak stands above the steps' median low point, in bytes"
    )
    peak_bytes_in_use: int = Field(description="its peak memory in use, in bytes")
    swing_share_of_peak: float = Field(description="the swing's share (0-1) of the peak")
    ops: list[StepTemporariesOp] = Field(description="the ops allocating the most per step")


# A tf.function traced again also pays outside the tracing its events mark: its first run
# instantiates and optimises the new concrete function, and every call looks up a cache that
# grows by one function a trace. One trace removes this share of the step's rest (beside the
# marked tracing): the median over the 15 retracing pairs of bench/calibration/corpus-steps.json,
# -2 and -3 (`bench_calibration.fit_steps`: each pair's measured saving less its marked share,
# over the rest). Reported on corpus-steps-4.json, which it was not fitted on.
RETRACE_REST_REMOVED = 0.422
# An XLA function given one shape runs every call as its calls that neither traced nor
# compiled ran (`steady_share`), times this: the padding's compute (every batch run at the full
# size) and what else the fix costs. The median over the XLA pairs of corpus-xla.json and
# corpus-steps-3.json whose steady calls take 5 % of the step or more (each pair's calls' share
# less its measured saving, over its steady share). Reported on corpus-steps-4.json.
XLA_STEADY_COST = 1.101
# Where no call ran steady (each traced and compiled), the marked compiling and tracing go whole
# and this share of the rest: the new executables' first runs and lookups, less the padding.
# The median over such pairs of the same corpora.
XLA_REST_REMOVED = 0.863
# Each model's range: its point plus the spread of measured - predicted savings over its pairs
# that holds 80 % of them (split conformal, as the input model's).
RETRACE_SAVING_SPREAD = (-0.084, 0.098)
XLA_SAVING_SPREAD = (-0.153, 0.079)


def one_trace(marked: float, rest_removed: float, summary: Summary) -> tuple[float, float | None]:
    """A function given one trace (or one shape): the `marked` share of step time (its events'
    tracing or compiling) goes whole, and `rest_removed` of the rest, what those events do not
    mark. The saving and the step after."""
    marked = min(max(marked, 0.0), 1.0)
    point = round(min(1.0, max(0.0, marked + (1 - marked) * rest_removed)), 4)
    now = summary.step_time.avg_ms
    return point, round(now * (1 - point), 3) if now else None


def retrace(finding: Finding, summary: Summary) -> Impact:
    """A retraced tf.function given one trace (a tensor argument, an input signature): the
    marked tracing's share of step time (`impact_share`) goes whole, and of the rest
    `RETRACE_REST_REMOVED` (fitted), what the new functions cost to run the first time and to
    find among the traced ones. The range: the point plus `RETRACE_SAVING_SPREAD`."""
    evidence = finding.evidence
    calls = ""
    if evidence.get("traced_call_ms") and evidence.get("untraced_call_ms"):
        calls = (
            f" A call that traced took {evidence['traced_call_ms']:.3g} ms, one that did not "
            f"{evidence['untraced_call_ms']:.3g} ms ({evidence.get('untraced_run_ms') or 0:.3g} "
            "ms of it running the graph)."
        )
    point, after = one_trace(finding.impact_share, RETRACE_REST_REMOVED, summary)
    return Impact(
        step_ms_now=summary.step_time.avg_ms,
        step_ms_after=after,
        saving_share=point,
        saving_range=spread_about(point, RETRACE_SAVING_SPREAD),
        basis=f"The fix keeps one trace: the {finding.impact_share:.0%} of step time spent "
        f"building graphs goes, and about {RETRACE_REST_REMOVED:.0%} of the rest, which the new "
        "functions cost to run first and to look up." + calls,
    )


def compiling(finding: Finding, summary: Summary) -> Impact:
    """Compilation XProf's step breakdown shows (`impact_share`) gone: the step's other parts
    (input, compute) stay, so the point is that share; at most it and `XLA_REST_REMOVED` of the
    rest, what the XLA family's recompiling steps lost beside their marked compiling. Not
    fitted: TF 2.21's CPU captures show no compile time in XProf's breakdown (0.0), so no CPU
    pair measures this rule."""
    point, after = one_trace(finding.impact_share, 0.0, summary)
    most, _ = one_trace(finding.impact_share, XLA_REST_REMOVED, summary)
    return Impact(
        step_ms_now=summary.step_time.avg_ms,
        step_ms_after=after,
        saving_share=point,
        saving_range=(point, most),
        basis=f"The fix keeps one shape: the {point:.0%} of step time XProf counts as "
        f"compilation goes; at most also {XLA_REST_REMOVED:.0%} of the rest, as new executables "
        "cost beside their compiling.",
    )


def recompile(finding: Finding, summary: Summary) -> Impact:
    """An XLA function given one shape. Where some of its calls neither traced nor compiled,
    the fix makes every call such a call: its calls' share of step time (`calls_share`) becomes
    their steady share (`steady_share`) times `XLA_STEADY_COST` (fitted), the padding's
    compute. Otherwise its marked compiling (`impact_share`) and tracing (`tracing_share`) go
    whole, and of the rest `XLA_REST_REMOVED` (fitted). The range: the point plus
    `XLA_SAVING_SPREAD`."""
    evidence, now = finding.evidence, summary.step_time.avg_ms
    steady, calls = evidence.get("steady_share"), evidence.get("calls_share")
    if steady and calls:
        point = round(min(1.0, max(-1.0, calls - steady * XLA_STEADY_COST)), 4)
        after = round(now * (1 - point), 3) if now else None
        basis = (
            f"The fix keeps one shape: the function's calls, {calls:.0%} of step time, each "
            f"cost what a call that neither traced nor compiled cost ({steady:.0%} of step time "
            f"for them all), {XLA_STEADY_COST:.2g}x for the padding."
        )
    else:
        tracing = evidence.get("tracing_share") or 0.0
        point, after = one_trace(finding.impact_share + tracing, XLA_REST_REMOVED, summary)
        traced = f" and {tracing:.0%} tracing" if tracing >= 0.005 else ""
        basis = (
            f"The fix keeps one shape: the {finding.impact_share:.0%} of step time compiling"
            f"{traced} goes, and about {XLA_REST_REMOVED:.0%} of the rest (the new executables' "
            "first runs and lookups, less the padding's compute)."
        )
    return Impact(
        step_ms_now=now,
        step_ms_after=after,
        saving_share=point,
        saving_range=spread_about(point, XLA_SAVING_SPREAD),
        basis=basis,
    )


XLA_RECOMPILATION_ADVICE = Advice(
    jax="`jax.jit` compiles again for every new input shape, dtype or static "
    "argument: feed it few shapes (fixed batches, sequences padded to a few buckets, the last "
    "partial batch padded or dropped), keep `static_argnums` values few, and watch "
    "`jax.config.update('jax_log_compiles', True)`.",
)

STEP_TEMPORARIES_ADVICE = Advice(
    jax="Not a leak: the memory comes back at the end of every step. To lower "
    "the peak, recompute activations (`jax.checkpoint`), donate the buffers the step replaces "
    "(`jax.jit(step, donate_argnums=0)`), and compute in smaller chunks (`jax.lax.map` over "
    "slices, smaller batches).",
)


# retracing: a function traced at least this often in the capture, at least this often per
# step; warning once tracing takes this share of step time. A job that traced before the
# capture traces 0 times in it (measured: 0 in 2,690 calls); one new shape (a last partial
# batch) traces once; a Python number or a new shape as argument traced 1.0 times per step.
RETRACING_MIN_TRACES = 2
RETRACING_MIN_PER_STEP = 0.05
RETRACING_WARNING_SHARE = 0.10
# xla_recompilation: the same for XLA compilations; and a single compile counts when it came in
# at least this many of the marked steps: a compile takes long enough (0.4-1 s for the demo's
# small Keras model, seconds for real ones) that a short capture holds only one.
XLA_MIN_COMPILES = 2
XLA_MIN_PER_STEP = 0.05
XLA_ONE_COMPILE_MIN_PER_STEP = 0.5
XLA_WARNING_SHARE = 0.10
# step_temporaries: one step allocates and frees at least this much above its low point, and
# it is at least this share of the peak. Measured: stack/concat temporaries 91.6 MiB (94 % of
# the peak) and a 64 MiB scratch tensor over 256 MiB held (20 %) fire; the compute-bound demo
# (12 MiB) and 64 MiB over 1 GiB held (6 %) do not.
TEMPORARIES_MIN_SWING_BYTES = 32 << 20
TEMPORARIES_MIN_SWING_SHARE = 0.10

DOCS_RETRACING = "https://www.tensorflow.org/guide/function#controlling_retracing"
DOCS_XLA = "https://www.tensorflow.org/xla"
DOCS_MEMORY = "https://www.tensorflow.org/guide/profiler#memory_profile_tool"


def _capture_ms(summary: Summary) -> float | None:
    """The capture's length, which the counted traces and compiles all fall in: XProf's step
    count leaves out the steps cut by the capture's edges, whose compiles are in."""
    return summary.tf_functions.span_ms if summary.tf_functions else None


def _share(part_ms: float, whole_ms: float | None) -> float:
    """Of the capture's time, which a busy job spends in its steps; at most 1."""
    return round(min(1.0, part_ms / whole_ms), 4) if whole_ms else 0.0


def _often(count: int, per_step: float | None, minimum: int, min_per_step: float) -> bool:
    """Often enough in the capture, and per marked step when there are steps."""
    return count >= minimum and (per_step is None or per_step >= min_per_step)


def _rate(per_step: float | None, count: int) -> str:
    if per_step is None:
        return f"{count} times in the capture"
    return "at every step" if round(per_step, 1) == 1.0 else f"{per_step:.2g} times per step"


def _functions(summary: Summary) -> list[TfFunctionCalls]:
    return summary.tf_functions.functions if summary.tf_functions else []


@rule(
    Rule.RETRACING,
    evidence=RetracingEvidence,
    impact=retrace,
)
def retracing(summary: Summary) -> Finding | None:
    """A `tf.function` traced again at least `RETRACING_MIN_TRACES` times during the capture
    and at least `RETRACING_MIN_PER_STEP` times per step (info); warning once tracing takes
    `RETRACING_WARNING_SHARE` of step time. Counted from TF's own call events (traced or not),
    so warm-up tracing before the capture does not count.
    """
    candidates = [
        f
        for f in _functions(summary)
        if _often(f.traces, f.traces_per_step, RETRACING_MIN_TRACES, RETRACING_MIN_PER_STEP)
    ]
    if not candidates:
        return None
    f = max(candidates, key=lambda c: (c.tracing_ms, c.traces))
    whole = _capture_ms(summary)
    cost = _share(f.tracing_ms, whole)
    per_step = f.traces_per_step
    rate = _rate(per_step, f.traces)
    if f.traces >= f.calls:
        cause = (
            f"Every call of `{f.name}` traced a new graph, so something in its arguments is new "
            "at every call: a Python number or object (a learning rate, a step counter, a list) "
            "is part of the trace's key, pass it as a tensor (`tf.constant(x)`, or a "
            "`tf.Variable` you assign) instead; a new shape each call is the other cause: give "
            "the function an `input_signature` with `None` for the dimensions that vary, or "
            "`reduce_retracing=True`."
        )
    else:
        cause = (
            f"{f.traces} of {f.calls} calls of `{f.name}` traced a new graph: its arguments "
            "keep taking new shapes or Python values. Give it an `input_signature` with `None` "
            "for the dimensions that vary (or `reduce_retracing=True`), and pass Python numbers "
            "as tensors."
        )
    if f.jit_compile:
        cause += " Each trace of this XLA function is compiled again too (see xla_recompilation)."
    return Finding(
        severity=Severity.WARNING if cost >= RETRACING_WARNING_SHARE else Severity.INFO,
        title=f"tf.function `{f.name}` was traced again {rate}: "
        f"{cost:.0%} of step time building graphs",
        evidence=RetracingEvidence(
            function=f.name,
            traces=f.traces,
            calls=f.calls,
            steps=summary.step_time.count,
            traces_per_step=per_step,
            tracing_ms=f.tracing_ms,
            tracing_share=cost,
            traced_in_all=f.traced_in_all,
            jit_compile=f.jit_compile,
            traced_call_ms=f.traced_call_ms,
            untraced_call_ms=f.untraced_call_ms,
            untraced_run_ms=f.untraced_run_ms,
        ).model_dump(),
        recommendation=cause,
        docs=DOCS_RETRACING,
        impact_share=cost,
    )


@rule(
    Rule.XLA_RECOMPILATION,
    evidence=XlaRecompilationEvidence,
    impact=recompile,
    advice=XLA_RECOMPILATION_ADVICE,
)
def xla_recompilation(summary: Summary) -> Finding | None:
    """XLA compiled one function at least `XLA_MIN_COMPILES` times during the capture and at
    least `XLA_MIN_PER_STEP` times per step, or once in at least `XLA_ONE_COMPILE_MIN_PER_STEP`
    of the marked steps (a capture too short for the next compile) (info); warning once
    compiling takes `XLA_WARNING_SHARE` of step time. XProf reports no compile time for these
    (0.0 on CPU): the time is read from the compiler's own events.
    """
    candidates = [
        f
        for f in _functions(summary)
        if _often(f.compiles, f.compiles_per_step, XLA_MIN_COMPILES, XLA_MIN_PER_STEP)
        or (f.compiles == 1 and (f.compiles_per_step or 0) >= XLA_ONE_COMPILE_MIN_PER_STEP)
    ]
    if not candidates:
        return None
    f = max(candidates, key=lambda c: (c.compile_ms, c.compiles))
    whole = _capture_ms(summary)
    cost = _share(f.compile_ms, whole)
    per_step = f.compiles_per_step
    rate = _rate(per_step, f.compiles)
    why = (
        "each new trace is a new program to compile"
        if f.traces
        else "the function did not retrace, but XLA compiles once per input shape"
    )
    return Finding(
        severity=Severity.WARNING if cost >= XLA_WARNING_SHARE else Severity.INFO,
        title=f"XLA compiled `{f.name}` {rate}: {cost:.0%} of the capture compiling",
        evidence=XlaRecompilationEvidence(
            function=f.name,
            compiles=f.compiles,
            compiles_per_step=per_step,
            compile_ms=f.compile_ms,
            compile_ms_per_compile=round(f.compile_ms / f.compiles, 3),
            compile_share=cost,
            traces=f.traces,
            tracing_share=_share(f.tracing_ms, whole),
            calls=f.calls,
            calls_share=_share(f.calls_ms, whole),
            steady_share=_share(f.steady_call_ms * f.calls, whole) if f.steady_call_ms else None,
            xprof_compile_ms_avg=summary.step_time.breakdown_avg.compile_ms,
        ).model_dump(),
        recommendation=f"The shapes `{f.name}` is called with keep changing, and {why}. "
        "Feed it few shapes: fixed batches (`batch(..., drop_remainder=True)`), sequences "
        "padded to a fixed length or to a few buckets (`padded_batch`, "
        "`bucket_by_sequence_length`), the last partial batch padded or dropped; or leave "
        "this function out of `jit_compile`.",
        docs=DOCS_XLA,
        impact_share=cost,
    )


def _sawtooth(m: AllocatorMemory) -> bool:
    swing = step_swing_bytes(m)
    return bool(
        m.allocations_by_op
        and swing >= TEMPORARIES_MIN_SWING_BYTES
        and m.peak_bytes_in_use
        and swing >= TEMPORARIES_MIN_SWING_SHARE * m.peak_bytes_in_use
    )


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


@rule(
    Rule.STEP_TEMPORARIES,
    silenced_by=(Rule.MEMORY_GROWTH,),
    evidence=StepTemporariesEvidence,
    impact=memory_saving,
    advice=STEP_TEMPORARIES_ADVICE,
)
def step_temporaries(summary: Summary) -> Finding | None:
    """Memory rises and falls inside every step without growing: the peak stands at least
    `TEMPORARIES_MIN_SWING_BYTES` and `TEMPORARIES_MIN_SWING_SHARE` of the peak above the steps'
    low point (info). Names the ops allocating the most per step, from the capture's memory
    events. Silenced by memory_growth: a low point that steps up once is still a sawtooth, one
    that climbs step after step is a leak, and a capture that leaks is not told "not a leak".
    """
    sawtooth = [m for m in summary.memory if _sawtooth(m)]
    if not sawtooth:
        return None
    m = max(sawtooth, key=step_swing_bytes)
    swing = step_swing_bytes(m)
    ops = [
        StepTemporariesOp(
            op=a.op_name,
            shapes=a.shapes,
            bytes_per_step=a.bytes_per_step,
            count_per_step=a.count_per_step,
            peak_alive_bytes=a.peak_alive_bytes,
        )
        for a in m.allocations_by_op
    ]
    top = m.allocations_by_op[0]
    named = ", ".join(
        f"`{a.op_name}` ({_mib(a.bytes_per_step)} in {a.count_per_step:g} allocations, "
        f"up to {_mib(a.peak_alive_bytes)} alive)"
        for a in m.allocations_by_op[:3]
    )
    return Finding(
        severity=Severity.INFO,
        title=f"Each step allocates and frees up to {_mib(swing)} on {m.allocator} (peak "
        f"{_mib(m.peak_bytes_in_use)}); `{top.op_name}` allocates the most "
        f"({_mib(top.bytes_per_step)} per step)",
        evidence=StepTemporariesEvidence(
            allocator=m.allocator,
            swing_bytes=swing,
            peak_bytes_in_use=m.peak_bytes_in_use,
            swing_share_of_peak=round(swing / m.peak_bytes_in_use, 4),
            ops=ops,
        ).model_dump(),
        recommendation=f"Not a leak: the memory comes back at the end of every step. Per step: "
        f"{named}. To lower the peak, release references early (`del` intermediate tensors "
        "you no longer need), avoid `tf.concat`/`tf.stack` over many pieces kept alive until "
        "the end (write into a `tf.TensorArray` or a preallocated tensor), and compute in "
        "smaller chunks (smaller batches, or a loop over slices).",
        docs=DOCS_MEMORY,
        impact_share=0.0,
    )
