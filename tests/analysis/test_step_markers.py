"""Step markers around calls that run several training steps: per-step figures from XProf's step
table, loops that would hide the markers, and real captures of such jobs (Keras 3, Keras 2 through
tf_keras, which scripts/setup installs for the tests, and a custom loop)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from profiler_service.analysis.models import StepBreakdown, StepSample, StepTime
from profiler_service.analysis.readers.host_events import Span
from profiler_service.analysis.readers.step_markers import (
    add_time_between_markers,
    capture_span_ms,
    per_training_step,
    steps_per_marker,
    unhide_markers_in_loops,
)
from profiler_service.analysis.summary import analyse_run

AGREEMENT = 0.10  # the bound between the snapshot's figures and the job's own clock


def step_table(nums: list[int], call_ms: float = 8.0, name: str = "train") -> StepTime:
    """A StepTime as overview.read_step_time builds it from XProf's rows."""
    parts = StepBreakdown(input_ms=call_ms / 2, host_compute_ms=call_ms / 2)
    return StepTime(
        count=len(nums),
        avg_ms=call_ms,
        min_ms=call_ms,
        max_ms=call_ms,
        stddev_ms=0.0,
        breakdown_avg=parts,
        steps=[
            StepSample(name=f"{name} {n}", step_time_ms=call_ms, breakdown=parts.model_copy())
            for n in nums
        ],
    )


def test_markers_four_steps_apart_give_per_training_step_figures():
    st = step_table(list(range(20, 60, 4)))  # 10 calls of 4 steps, 8 ms each
    notes = per_training_step(st)
    assert st.steps_per_marker == 4 and st.markers == 10
    # XProf set aside the first and last of more than 5 marked steps: they were in the capture.
    assert st.count == (10 + 2) * 4
    assert (st.avg_ms, st.min_ms, st.max_ms) == (2.0, 2.0, 2.0)
    assert st.breakdown_avg.input_ms == 1.0 and st.breakdown_avg.host_compute_ms == 1.0
    assert {s.step_time_ms for s in st.steps} == {2.0}
    assert st.steps[0].breakdown.input_ms == 1.0
    assert "4 training steps" in notes[0]


def test_one_step_per_marker_keeps_the_times_and_counts_the_set_aside_steps():
    st = step_table(list(range(7, 17)), call_ms=3.0)
    assert per_training_step(st) == []
    assert st.steps_per_marker == 1 and st.avg_ms == 3.0 and st.count == 12
    few = step_table([0, 1, 2], call_ms=3.0)  # XProf keeps all of 5 or fewer
    per_training_step(few)
    assert few.count == 3


@pytest.mark.parametrize(
    ("nums", "expected"),
    [
        ([0, 4, 8, 12, 0, 4, 8, 12], 4),  # Keras 2 numbers each epoch from 0
        ([0, 7, 9, 30, 31, 52], 1),  # a numbering of the user's own: no agreed gap
        ([5, 5, 5, 5], 1),  # one step number for every call
        ([3], 1),
    ],
)
def test_steps_per_marker_is_the_gap_most_markers_agree_on(nums, expected):
    assert steps_per_marker(step_table(nums)) == expected


def markers(nums: list[int], period_ms: float, call_ms: float, name: str = "train") -> list[Span]:
    """Root step markers as the host events hold them: one call every `period_ms`."""
    ps = 10**9
    return [
        Span(0, int(i * period_ms * ps), int((i * period_ms + call_ms) * ps), name,
             {"step_num": num, "_r": 1})
        for i, num in enumerate(nums)
    ]  # fmt: skip


def test_the_loop_between_marked_calls_is_added_to_each_step():
    st = step_table(list(range(1, 10)), call_ms=2.0)  # XProf set aside markers 0 and 10
    notes = add_time_between_markers(st, markers(list(range(11)), period_ms=2.5, call_ms=2.0))
    assert st.avg_ms == 2.5 and (st.min_ms, st.max_ms) == (2.5, 2.5)
    assert st.breakdown_avg.between_steps_ms == 0.5
    assert {s.breakdown.between_steps_ms for s in st.steps} == {0.5}
    assert st.breakdown_avg.input_ms == 1.0  # XProf's own parts are kept
    assert "20% of each marked step ran between the markers" in notes[0]
    per_training_step(st)
    assert st.avg_ms == 2.5 and st.count == 11


def test_the_time_between_is_per_training_step_when_a_marker_holds_several():
    st = step_table(list(range(4, 40, 4)), call_ms=8.0)
    add_time_between_markers(st, markers(list(range(0, 44, 4)), period_ms=10.0, call_ms=8.0))
    per_training_step(st)
    assert st.steps_per_marker == 4
    assert st.avg_ms == 2.5 and st.breakdown_avg.between_steps_ms == 0.5


def test_an_epochs_end_or_a_missing_marker_is_no_time_between_steps():
    st = step_table([1, 2, 3, 0, 1, 2], call_ms=2.0)  # a new epoch numbers from 0 again
    spans = markers([0, 1, 2, 3, 0, 1, 2, 3], period_ms=2.0, call_ms=2.0)
    spans[3:] = markers([0, 1, 2, 3, 5], period_ms=2.0, call_ms=2.0)  # 4 left out
    for i, span in enumerate(spans[3:]):  # the second epoch starts 100 ms later
        spans[3 + i] = Span(0, span.start_ps + 10**11, span.end_ps + 10**11, span.name, span.stats)
    assert add_time_between_markers(st, spans) == []
    assert st.avg_ms == 2.0 and st.breakdown_avg.between_steps_ms == 0.0


def test_time_between_below_a_percent_leaves_xprofs_figures():
    st = step_table(list(range(1, 10)), call_ms=2.0)
    assert add_time_between_markers(st, markers(list(range(11)), 2.01, 2.0)) == []
    assert st.avg_ms == 2.0 and {s.step_time_ms for s in st.steps} == {2.0}


def test_the_span_ends_where_only_the_thread_pool_tracer_recorded(tmp_path):
    """TF stops its thread-pool tracer after collecting the host tracer's events: the stop time
    says 3 s, the steps were traced for 2."""
    space = xplane_pb2.XSpace()
    env = space.planes.add(id=2, name="Task Environment")
    for i, (name, value) in enumerate(
        [("profile_start_time", 10**9), ("profile_stop_time", 4 * 10**9)], 1
    ):
        env.stat_metadata[i].id, env.stat_metadata[i].name = i, name
        env.stats.add(metadata_id=i, uint64_value=value)
    host = space.planes.add(id=1, name="/host:CPU")
    host.event_metadata[1].id, host.event_metadata[1].name = 1, "train"
    host.event_metadata[2].id, host.event_metadata[2].name = 2, "ThreadpoolListener::Record"
    line = host.lines.add(id=1, name="python", timestamp_ns=0)
    line.events.add(metadata_id=1, offset_ps=0, duration_ps=2 * 10**12)
    line.events.add(metadata_id=2, offset_ps=2 * 10**12, duration_ps=10**12)
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert capture_span_ms(path) == 2000.0


def test_validation_markers_do_not_break_the_gap():
    st = step_table([0, 2, 4, 6])
    st.steps[2:2] = [StepSample(name=f"test {n}", step_time_ms=1.0, breakdown=StepBreakdown())
                     for n in (0, 2)]  # fmt: skip
    assert steps_per_marker(st) == 2


def synthetic_capture(path: Path, iter_nums: list[int], root: bool = True) -> None:
    """A host plane with a marker (with `_r` or not) and executor events in a loop."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].id, plane.event_metadata[1].name = 1, "train"
    plane.event_metadata[2].id, plane.event_metadata[2].name = 2, "ExecutorState::Process"
    names = ["iter_num", "id", "_r", "step_num"] if root else ["iter_num", "id", "", "step_num"]
    for i, name in enumerate(names, start=1):
        if name:  # TF declares a stat's name where an event first uses it
            plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name
    line = plane.lines.add(id=1, name="python", timestamp_ns=1000)
    marker = line.events.add(metadata_id=1, offset_ps=0, duration_ps=10**9)
    marker.stats.add(metadata_id=4, int64_value=8)
    if root:
        marker.stats.add(metadata_id=3, int64_value=1)
    compute = plane.lines.add(id=2, name="tf_Compute", timestamp_ns=1000)
    for i, iteration in enumerate(iter_nums):
        event = compute.events.add(metadata_id=2, offset_ps=i * 1000, duration_ps=500)
        event.stats.add(metadata_id=2, int64_value=77)
        event.stats.add(metadata_id=1, int64_value=iteration)
    path.write_bytes(space.SerializeToString())


def test_loop_iterations_under_root_markers_are_zeroed_and_everything_else_kept(tmp_path):
    capture = tmp_path / "host.xplane.pb"
    synthetic_capture(capture, [0, 1, 2, 3, 0, 1])
    cached = tmp_path / "ALL_HOSTS.op_stats_v2.pb"
    cached.write_bytes(b"stale")
    notes = unhide_markers_in_loops([capture])
    assert "4 iteration numbers" in notes[0]
    assert not cached.exists()  # XProf would have reused op stats of the file as it was
    space = xplane_pb2.XSpace()
    space.ParseFromString(capture.read_bytes())
    expected = xplane_pb2.XSpace()
    synthetic_capture(tmp_path / "want.xplane.pb", [0] * 6)
    expected.ParseFromString((tmp_path / "want.xplane.pb").read_bytes())
    assert space == expected


def test_loops_without_root_markers_are_left_to_xprof(tmp_path):
    capture = tmp_path / "host.xplane.pb"
    synthetic_capture(capture, [0, 1, 2], root=False)
    before = capture.read_bytes()
    assert unhide_markers_in_loops([capture]) == []
    assert capture.read_bytes() == before


def captured(run: Callable[[], int], seconds: float = 1.5) -> tuple[Path, int, float]:
    """Run `run` (one call, returns the training steps it ran) under an in-process capture;
    the run directory, and the job's own count and ms per step over the traced calls."""
    import tensorflow as tf

    for _ in range(3):
        run()  # traced and warm before the capture
    logdir = tempfile.mkdtemp(prefix="steps-")
    tf.profiler.experimental.start(logdir)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        steps += run()
    elapsed = time.perf_counter() - started
    tf.profiler.experimental.stop()
    return next(Path(logdir).glob("plugins/profile/*")), steps, elapsed * 1000 / steps


def test_custom_loop_with_a_while_loop_in_the_marked_call():
    """Any tf.while_loop under a marker hid every step from XProf (0 steps) before."""
    import tensorflow as tf

    from profiler_service.steps import training_step

    w = tf.Variable(tf.random.normal((128, 128)) * 0.01)
    x = tf.random.normal((128, 128))

    @tf.function
    def four_steps():
        def body(i):
            w.assign_sub(0.0001 * tf.matmul(tf.nn.relu(tf.matmul(x, w)), w))
            return i + 1

        tf.while_loop(lambda i: i < 4, body, [tf.constant(0)])

    first = iter(range(0, 10**9, 4))

    def run() -> int:
        with training_step(next(first), steps=4):
            four_steps()
        return 4

    run_dir, steps, ms = captured(run)
    result = analyse_run(run_dir)
    st = result.summary.step_time
    assert st.steps_per_marker == 4
    assert st.count == pytest.approx(steps, rel=AGREEMENT)
    assert st.avg_ms == pytest.approx(ms, rel=AGREEMENT)


def test_python_between_marked_steps_is_counted_and_found():
    """A custom loop that decodes in Python outside its step marker (the article's first case):
    XProf's table holds the marked 1-2 ms only; the snapshot the whole step, and the finding."""
    import tensorflow as tf

    from profiler_service.steps import training_step

    w = tf.Variable(tf.random.normal((256, 256)) * 0.01)
    step = tf.function(lambda x: w.assign_sub(0.0001 * tf.matmul(x, w)))
    x = tf.random.normal((256, 256))
    numbers = iter(range(10**9))

    def run() -> int:
        with training_step(next(numbers)):
            step(x)
        # "decoding" the next batch in Python: twice the marked step's 1-3 ms (more under load)
        busy_until = time.perf_counter() + 0.006
        while time.perf_counter() < busy_until:
            pass
        return 1

    run_dir, steps, ms = captured(run)
    result = analyse_run(run_dir)
    st = result.summary.step_time
    between = st.breakdown_avg.between_steps_ms
    assert between >= 5.5
    assert st.avg_ms == pytest.approx(ms, rel=AGREEMENT)
    assert st.count == pytest.approx(steps, rel=AGREEMENT)
    finding = {f.rule: f for f in result.findings}["between_steps"]
    assert finding.evidence["between_steps_share"] == pytest.approx(between / st.avg_ms, abs=0.02)
    assert finding.evidence["between_steps_share"] > 0.5 and "tf.data" in finding.recommendation


def keras_fit_run(keras, n: int, callback) -> Callable[[], int]:
    """One `fit` call of 4 * n batches per run: the model's own steps_per_execution loop."""
    import numpy as np

    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=n)
    x = np.random.default_rng(0).random((4 * n * 64, 32), dtype=np.float32)

    def run() -> int:
        model.fit(x, x[:, :1], batch_size=64, epochs=1, verbose=0, callbacks=[callback])
        return 4 * n

    return run


def test_keras3_fit_with_steps_per_execution_is_timed_per_training_step():
    from tensorflow import keras

    from profiler_service.steps import ProfilerStepCallback

    callback = ProfilerStepCallback()
    run_dir, steps, _ = captured(keras_fit_run(keras, 4, callback))
    st = analyse_run(run_dir).summary.step_time
    assert callback._marks is True
    assert st.steps_per_marker == 4
    assert_counted(st.count, steps, steps_per_call=16)


def test_keras2_marks_its_own_steps_and_the_callback_adds_none():
    import tf_keras  # scripts/setup installs it with the test extras

    from profiler_service.steps import ProfilerStepCallback

    callback = ProfilerStepCallback()
    run_dir, steps, _ = captured(keras_fit_run(tf_keras, 4, callback))
    st = analyse_run(run_dir).summary.step_time
    assert callback._marks is False  # Keras 2's fit wraps each call in Trace('train', ...)
    assert st.steps_per_marker == 4
    assert_counted(st.count, steps, steps_per_call=16)


def assert_counted(count: int, steps: int, steps_per_call: int) -> None:
    """Every step the job ran while traced, and at most one call more at each end: the count
    adds the calls the capture's start and stop cut, estimated from its span, which here also
    holds each fit()'s own set-up between calls (a few calls in all on a loaded machine)."""
    assert steps <= count <= steps + 2 * steps_per_call, (count, steps)


def test_average_comes_from_the_rows_when_xprof_rounded_it():
    st = step_table(list(range(0, 40, 4)), call_ms=8.02)
    st.avg_ms = st.min_ms = st.max_ms = 8.0  # XProf's properties: 0.1 ms steps
    per_training_step(st)
    assert st.avg_ms == st.min_ms == st.max_ms == 2.005
