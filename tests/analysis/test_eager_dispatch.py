"""Ops run eagerly inside the steps, read from hand-made host events whose answer is known, and
the eager_execution finding and its impact on a CPU, where XProf reports no eager share."""

from __future__ import annotations

import pytest
from helpers import assert_typed_evidence

from profiler_service.analysis.findings import RULES, estimate
from profiler_service.analysis.findings.eager import (
    EAGER_KERNEL_KEPT,
    EAGER_KERNEL_KEPT_MIN,
    EAGER_OP_OVERHEAD_MS,
    EAGER_SAVING_SPREAD,
)
from profiler_service.analysis.models import EagerDispatch, StepTime, Summary
from profiler_service.analysis.readers.eager_dispatch import read_eager_dispatch
from profiler_service.analysis.readers.host_events import HostEvents, Span

MS = 10**9  # ps


def eager_steps(steps: int, ops: int, function: bool = False) -> HostEvents:
    """Steps of 10 ms: `ops` eager ops of 0.3 ms dispatch each (0.1 ms of it the kernel), and
    with `function` one tf.function call of 4 ms whose own entry and kernel must not count."""
    found = HostEvents()
    for i in range(steps):
        start = i * 10 * MS
        found.steps.append(Span(0, start, start + 10 * MS, "train"))
        t = start
        for _ in range(ops):
            found.eager_entries.append(Span(0, t, t + MS * 3 // 10, "TFE_Py_FastPathExecute_C"))
            found.eager_ops.append(
                Span(0, t + MS // 10, t + MS * 3 // 10, "EagerLocalExecute: MatMul")
            )
            found.eager_kernels.append(
                Span(0, t + MS // 5, t + MS * 3 // 10, "KernelAndDeviceFunc::Run")
            )
            t += MS // 2
        if function:
            found.eager_entries.append(Span(0, t, t + 4 * MS, "EagerExecute"))
            found.eager_ops.append(Span(0, t, t + 4 * MS, "EagerLocalExecute: __inference_f_12"))
            found.eager_kernels.append(Span(0, t, t + 4 * MS, "KernelAndDeviceFunc::Run"))
    return found


def test_eager_ops_in_steps_are_counted_with_their_dispatch_and_kernels():
    eager = read_eager_dispatch(eager_steps(20, ops=12))
    assert (eager.ops_per_step, eager.step_ms) == (12, 10.0)
    assert eager.dispatch_ms_per_step == pytest.approx(3.6)
    assert eager.kernel_ms_per_step == pytest.approx(1.2)
    assert not eager.in_tf_function and eager.dispatch_share == pytest.approx(0.36)


def test_a_tf_function_call_in_the_step_is_no_eager_op():
    eager = read_eager_dispatch(eager_steps(20, ops=2, function=True))
    assert eager.ops_per_step == 2 and eager.in_tf_function
    assert eager.dispatch_ms_per_step == pytest.approx(0.6)  # the function's 4 ms left out
    assert read_eager_dispatch(eager_steps(20, ops=0, function=True)) is None


def summary_of(eager: EagerDispatch) -> Summary:
    return Summary(step_time=StepTime(count=eager.steps, avg_ms=eager.step_ms), eager=eager)


def test_an_eager_loop_on_a_cpu_is_named_and_its_fix_keeps_only_the_kernels():
    summary = summary_of(read_eager_dispatch(eager_steps(20, ops=12)))
    finding = RULES["eager_execution"](summary)
    assert finding is not None and finding.evidence["eager_ops_per_step"] == 12
    assert_typed_evidence(finding)  # the events' reading: its fields only
    got = estimate(finding, summary)
    # A graph keeps the kernels (1.2 ms a step, run faster) less each of the 12 ops' wrapper.
    after = 1.2 * EAGER_KERNEL_KEPT - 12 * EAGER_OP_OVERHEAD_MS
    assert got.step_ms_after == pytest.approx(after, abs=1e-3)
    below, above = EAGER_SAVING_SPREAD
    assert got.saving_range == (
        pytest.approx(1 - after / 10 + below, abs=1e-4),
        pytest.approx(min(1.0, 1 - after / 10 + above), abs=1e-4),
    )
    assert "traced away" in got.basis


def test_the_kernels_own_work_stays_however_many_ops_go():
    eager = EagerDispatch(
        steps=20, step_ms=10.0, ops_per_step=400, dispatch_ms_per_step=9.0,
        kernel_ms_per_step=2.0,
    )  # fmt: skip
    summary = summary_of(eager)
    got = estimate(RULES["eager_execution"](summary), summary)
    assert got.step_ms_after == pytest.approx(2.0 * EAGER_KERNEL_KEPT_MIN)  # not below 0
    assert got.saving_range[1] <= 1.0


def test_eager_ops_around_a_tf_function_save_their_dispatch_only():
    eager = EagerDispatch(
        steps=20, step_ms=10.0, ops_per_step=30, dispatch_ms_per_step=3.0,
        kernel_ms_per_step=1.0, in_tf_function=True,
    )  # fmt: skip
    summary = summary_of(eager)
    got = estimate(RULES["eager_execution"](summary), summary)
    # The Python around them (7 ms) and the kernels less their wrappers stay.
    after = 7.0 + 1.0 * EAGER_KERNEL_KEPT - 30 * EAGER_OP_OVERHEAD_MS
    assert got.step_ms_after == pytest.approx(after, abs=1e-3)
    assert got.saving_share == pytest.approx(1 - after / 10, abs=1e-4)


def test_a_few_eager_ops_a_step_are_no_finding():
    summary = summary_of(read_eager_dispatch(eager_steps(20, ops=2, function=True)))
    assert RULES["eager_execution"](summary) is None  # Keras's fit: its call and a conversion
