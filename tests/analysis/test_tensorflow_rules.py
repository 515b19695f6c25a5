"""retracing, xla_recompilation and step_temporaries fire at their named thresholds and not just
below them; the figures in the summaries are of the shape tf_functions.py and
step_allocations.py read from real captures."""

from __future__ import annotations

from helpers import assert_typed_evidence

from profiler_service.analysis.findings import RULES, evaluate
from profiler_service.analysis.findings import tensorflow as tf_rules
from profiler_service.analysis.models import (
    AllocatorMemory,
    MemoryPoint,
    OpAllocations,
    Severity,
    StepTime,
    Summary,
    TfFunctionCalls,
    TfFunctions,
)
from profiler_service.analysis.readers.memory import fit_growth
from profiler_service.analysis.readers.step_allocations import worth_reading

MIB = 2**20


def functions(*calls: TfFunctionCalls, span_ms: float = 2000.0, steps: int = 100) -> Summary:
    return Summary(
        step_time=StepTime(count=steps, avg_ms=span_ms / steps),
        tf_functions=TfFunctions(host="h", span_ms=span_ms, functions=list(calls)),
    )


def traced(traces: int, per_step: float | None, tracing_ms: float, calls: int = 100, **kw):
    return TfFunctionCalls(
        name="train_step",
        calls=calls,
        traces=traces,
        tracing_ms=tracing_ms,
        traces_per_step=per_step,
        **kw,
    )


def compiled(compiles: int, per_step: float | None, compile_ms: float, traces: int = 0):
    return TfFunctionCalls(
        name="train_step",
        calls=100,
        traces=traces,
        tracing_ms=0.0,
        jit_compile=True,
        compiles=compiles,
        compile_ms=compile_ms,
        compiles_per_step=per_step,
    )


def test_retracing_needs_enough_traces_in_the_capture_and_per_step():
    at = tf_rules.RETRACING_MIN_TRACES
    per_step = tf_rules.RETRACING_MIN_PER_STEP
    assert RULES["retracing"](functions(traced(at, per_step, 10.0))) is not None
    assert RULES["retracing"](functions(traced(at - 1, 1.0, 10.0))) is None
    assert RULES["retracing"](functions(traced(50, per_step * 0.99, 10.0))) is None
    assert RULES["retracing"](functions(traced(0, 0.0, 0.0))) is None
    # Without step markers, the count in the capture decides.
    assert RULES["retracing"](functions(traced(at, None, 10.0))) is not None


def test_retracing_warns_once_tracing_takes_its_share_and_names_the_cause():
    share_ms = tf_rules.RETRACING_WARNING_SHARE * 2000
    warning = RULES["retracing"](functions(traced(100, 1.0, share_ms)))
    assert warning.severity is Severity.WARNING
    assert warning.evidence["tracing_share"] == tf_rules.RETRACING_WARNING_SHARE
    assert warning.impact_share == tf_rules.RETRACING_WARNING_SHARE
    assert "Every call of `train_step` traced" in warning.recommendation
    assert "pass it as a tensor" in warning.recommendation
    info = RULES["retracing"](functions(traced(30, 0.3, share_ms - 1)))
    assert info.severity is Severity.INFO
    assert "30 of 100 calls" in info.recommendation and "input_signature" in info.recommendation
    xla = RULES["retracing"](functions(traced(30, 0.3, 1.0, jit_compile=True)))
    assert "compiled again too" in xla.recommendation


def test_xla_recompilation_at_its_thresholds_and_its_cause():
    at, per_step = tf_rules.XLA_MIN_COMPILES, tf_rules.XLA_MIN_PER_STEP
    share_ms = tf_rules.XLA_WARNING_SHARE * 2000
    finding = RULES["xla_recompilation"](functions(compiled(at, per_step, share_ms)))
    assert finding.severity is Severity.WARNING
    assert finding.evidence["compile_ms_per_compile"] == share_ms / at
    assert "XLA compiles once per input shape" in finding.recommendation
    assert "drop_remainder=True" in finding.recommendation
    retraced = RULES["xla_recompilation"](functions(compiled(40, 0.4, share_ms - 1, traces=40)))
    assert retraced.severity is Severity.INFO
    assert "each new trace is a new program" in retraced.recommendation
    assert RULES["xla_recompilation"](functions(compiled(9, per_step * 0.99, 500.0))) is None
    # One compile: only when it came in at least its share of the marked steps (a capture too
    # short to hold the next one), never without steps to judge by.
    one = tf_rules.XLA_ONE_COMPILE_MIN_PER_STEP
    assert at - 1 == 1
    assert RULES["xla_recompilation"](functions(compiled(1, one, 500.0))) is not None
    assert RULES["xla_recompilation"](functions(compiled(1, one * 0.99, 500.0))) is None
    assert RULES["xla_recompilation"](functions(compiled(1, None, 500.0))) is None


def test_each_rules_evidence_is_its_model():
    swing = tf_rules.TEMPORARIES_MIN_SWING_BYTES
    for name, summary in (
        ("retracing", functions(traced(100, 1.0, 300.0))),
        ("retracing", functions(traced(30, None, 1.0, jit_compile=True))),
        ("xla_recompilation", functions(compiled(20, 1.0, 500.0))),
        ("xla_recompilation", functions(compiled(20, None, 500.0, traces=20))),
        ("step_temporaries", sawtooth(peak=swing + 8 * MIB, floor=8 * MIB)),
    ):
        finding = RULES[name](summary)
        assert finding is not None, name
        assert_typed_evidence(finding)


def test_shares_are_of_the_capture_and_never_above_one():
    finding = RULES["xla_recompilation"](functions(compiled(20, 1.2, 2100.0)))
    assert finding.evidence["compile_share"] == 1.0


def sawtooth(peak: int, floor: int | list[int], ops: bool = True) -> Summary:
    floors = floor if isinstance(floor, list) else [floor] * 10
    points = [(100.0 * i, b) for i, b in enumerate(floors)]  # a low point every 100 ms
    return Summary(
        memory=[
            AllocatorMemory(
                allocator="mklcpu",
                peak_bytes_in_use=peak,
                step_floors=[MemoryPoint(time_ms=t, bytes_in_use=b) for t, b in points],
                growth=fit_growth("steps", points, len(points), None, peak),
                allocations_by_op=[
                    OpAllocations(
                        op_name="concat",
                        shapes=["[32,1365,256]"],
                        bytes_per_step=44 * MIB,
                        count_per_step=1.0,
                        peak_alive_bytes=44 * MIB,
                    )
                ]
                if ops
                else [],
            )
        ]
    )


def test_step_temporaries_at_its_swing_in_bytes_and_share_of_peak():
    swing = tf_rules.TEMPORARIES_MIN_SWING_BYTES
    finding = RULES["step_temporaries"](sawtooth(peak=swing + 8 * MIB, floor=8 * MIB))
    assert finding is not None and finding.severity is Severity.INFO
    assert finding.evidence["swing_bytes"] == swing
    assert "`concat`" in finding.title and "Not a leak" in finding.recommendation
    assert RULES["step_temporaries"](sawtooth(peak=swing + 8 * MIB - 1, floor=8 * MIB)) is None
    # 1 GiB held all along and a 64 MiB sawtooth: 6 % of the peak, below the share.
    share = tf_rules.TEMPORARIES_MIN_SWING_SHARE
    big = int(64 * MIB / share)
    assert RULES["step_temporaries"](sawtooth(peak=big, floor=big - 64 * MIB)) is not None
    assert RULES["step_temporaries"](sawtooth(peak=2**30 + 64 * MIB, floor=2**30)) is None
    # Nothing read by op: silent.
    assert RULES["step_temporaries"](sawtooth(peak=200 * MIB, floor=0, ops=False)) is None


# The low points of a real 64 MiB-temporaries job (tests/e2e/test_tensorflow_pathologies.py)
# captured beside two processes burning the cores stepped from 7.3 MiB (some steps 4.25) to
# 8.7 MiB once, as the allocator kept a larger block: here 7.3 then 8.7 from mid-capture on.
# Fitted: R² 0.75, one rise in 63, the second half flat.
STEPPED_UP = [int(7.33 * MIB)] * 32 + [int(8.67 * MIB)] * 32


def test_a_low_point_that_steps_up_once_is_still_a_sawtooth_not_a_leak():
    summary = sawtooth(peak=97 * MIB, floor=STEPPED_UP)
    growth = summary.memory[0].growth
    assert growth.r2 >= 0.5 and growth.bytes_per_s > 0  # the kept search reads it: may grow
    assert worth_reading(summary.memory[0])  # and what each op allocates a step is read too
    assert RULES["memory_growth"](summary) is None
    finding = RULES["step_temporaries"](summary)
    assert finding is not None and "Not a leak" in finding.recommendation


def test_a_low_point_that_climbs_every_step_is_memory_growth_never_step_temporaries():
    climbing = [8 * MIB + i * MIB for i in range(40)]  # 1 MiB kept every step
    summary = sawtooth(peak=200 * MIB, floor=climbing)
    assert RULES["memory_growth"](summary) is not None
    assert RULES["step_temporaries"](summary) is not None  # its sawtooth alone holds
    fired = {f.rule for f in evaluate(summary)}  # the registry applies silenced_by
    assert "memory_growth" in fired and "step_temporaries" not in fired
