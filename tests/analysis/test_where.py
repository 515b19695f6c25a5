"""A finding's `where` from the job's Python stacks (analysis/readers/python_stacks.py,
analysis/where.py): the user's function tf.data runs for input_bound, the user's lines the
loop's Python holds for the host-Python rules, and nothing for a cause that is not in the user's
Python."""

from __future__ import annotations

from profiler_service.analysis.models import Finding, Severity, Summary
from profiler_service.analysis.readers.python_stacks import read_stacks, summarise
from profiler_service.analysis.where import attribute, locate

SITE = "/venv/lib/python3.11/site-packages"
ROOTS = ["/usr/lib/python3.11", SITE]
TRAIN = "/home/me/project/train.py"
KERAS_FIT = (
    f"error_handler ({SITE}/keras/src/utils/traceback_utils.py:117);"
    f"TensorFlowTrainer.fit ({SITE}/keras/src/backend/tensorflow/trainer.py:377)"
)
GRAPH = (
    f"Function.__call__ ({SITE}/tensorflow/python/eager/polymorphic_function/"
    "polymorphic_function.py:833)"
)
PY_FUNC = f"FuncRegistry.__call__ ({SITE}/tensorflow/python/ops/script_ops.py:268)"
NUMPY = f"Generator.random ({SITE}/numpy/random/_generator.py:10)"

# A Keras fit whose tf.data pipeline decodes in Python (the demo's input-bound job).
INPUT_BOUND = f"""\
MainThread (tid 1);<module> ({TRAIN}:90);main ({TRAIN}:80);{KERAS_FIT};{GRAPH} 300
MainThread (tid 1);<module> ({TRAIN}:90);main ({TRAIN}:80);{KERAS_FIT} 20
thread (tid 7);{PY_FUNC};decode_example ({TRAIN}:12) 150
thread (tid 7);{PY_FUNC};decode_example ({TRAIN}:13);helper ({TRAIN}:30) 40
thread (tid 7);{PY_FUNC};decode_example ({TRAIN}:13);{NUMPY} 10
profiler-agent (tid 3);Server.run ({SITE}/uvicorn/server.py:60) 320
"""
# A custom loop of eager ops: the loop's own lines call TensorFlow op by op.
EAGER = f"""\
MainThread (tid 1);<module> ({TRAIN}:90);train_step ({TRAIN}:40);matmul ({SITE}/tensorflow/python/ops/math_ops.py:3) 120
MainThread (tid 1);<module> ({TRAIN}:90);train_step ({TRAIN}:41);assign_sub ({SITE}/tensorflow/python/ops/resource_variable_ops.py:9) 70
MainThread (tid 1);<module> ({TRAIN}:89) 4
"""  # noqa: E501


def finding(rule: str) -> Finding:
    return Finding(rule=rule, severity=Severity.WARNING, title=rule, recommendation="Fix it.")


def summary_of(folded: str) -> Summary:
    return Summary(python_stacks=summarise(read_stacks(folded), ROOTS))


def test_input_bound_names_the_function_tf_data_runs_and_its_busiest_line():
    summary = summary_of(INPUT_BOUND)
    stacks = summary.python_stacks
    assert stacks.pipeline_samples == 200 and stacks.samples == 840
    assert stacks.pipeline_library_share == 0.05  # 10 of 200 in NumPy's own frames
    found = attribute(finding("input_bound"), summary)
    assert [(s.function, s.file, s.line) for s in found.where] == [
        ("decode_example", TRAIN, 12)
    ]  # its helper is its own callee, not a second function tf.data runs
    assert found.where[0].share == 1.0
    assert found.recommendation.startswith("In your code: `decode_example` (train.py:12)")
    assert found.recommendation.endswith("Fix it.")


def test_keras_fit_and_the_graph_it_runs_are_no_line_of_the_users():
    """The loop is Keras' (and a tf.function's graph): no host-Python finding blames main()."""
    summary = summary_of(INPUT_BOUND)
    assert summary.python_stacks.loop_samples == 320 and summary.python_stacks.loop_lines == []
    for rule in ("eager_execution", "host_overhead", "between_steps"):
        assert locate(finding(rule), summary) == []


def test_eager_loop_names_the_lines_that_dispatch_the_ops():
    summary = summary_of(EAGER)
    found = attribute(finding("eager_execution"), summary)
    assert [(s.line, s.function) for s in found.where] == [(40, "train_step"), (41, "train_step")]
    assert [round(s.share, 2) for s in found.where] == [0.62, 0.36]  # line 89 holds under 5 %
    assert "train.py:40" in found.recommendation
    assert locate(finding("input_bound"), summary) == []  # tf.data ran no Python


def test_rules_whose_cause_is_not_in_python_get_no_where():
    summary = summary_of(EAGER)
    for rule in ("op_dominates", "memory_growth", "device_idle"):
        assert attribute(finding(rule), summary).where == []


def test_a_capture_without_stacks_gets_no_where_and_its_advice_unchanged():
    found = attribute(finding("input_bound"), Summary())
    assert found.where == [] and found.recommendation == "Fix it."


def test_the_profilers_frames_are_not_the_users_but_its_demo_jobs_are():
    ours = "/src/profiler_service/capture/in_process.py"
    demo = "/src/profiler_service/demo/job.py"
    stacks = summarise(
        read_stacks(
            f"a (tid 1);run ({ours}:10) 50\n"
            f"b (tid 2);{PY_FUNC};_python_decode ({demo}:40) 50\n"
            "c (tid 3);<module> (<frozen runpy>:1);"
            "loop (/tmp/__autograph_generated_file1.py:3) 9\n"
        ),
        ROOTS,
    )
    assert [s.function for s in stacks.pipeline_functions] == ["_python_decode"]
    assert stacks.loop_samples == 0


def test_stacks_as_py_spy_writes_them_read_alike():
    """py-spy's raw output: no thread part, `function (file:line)` frames."""
    stacks = read_stacks(f"<module> ({TRAIN}:5);step ({TRAIN}:9) 7\n")
    assert stacks == [("", [stacks[0][1][0], stacks[0][1][1]], 7)]
    assert [(f.function, f.line) for f in stacks[0][1]] == [("<module>", 5), ("step", 9)]


POLY = f"{SITE}/tensorflow/python/eager/polymorphic_function"
TRACE = (
    f"{GRAPH};Function._call ({POLY}/polymorphic_function.py:878);"
    f"call_function ({POLY}/tracing_compilation.py:132);"
    f"trace_function ({POLY}/tracing_compilation.py:178);"
    f"_maybe_define_function ({POLY}/tracing_compilation.py:283);"
    f"_create_concrete_function ({POLY}/tracing_compilation.py:310);"
    f"func_graph_from_py_func ({SITE}/tensorflow/python/framework/func_graph.py:1060)"
)
AUTOGRAPH = "outer_factory.<locals>.inner_factory.<locals>.tf__train_step (/tmp/__autograph_generated_fileab12.py:12)"  # noqa: E501
# A custom loop calling `train_step` (a tf.function) with a new Python float each step: it
# traces at every call (from line 50), runs its graph otherwise; Keras' fit (line 80) traces its
# own step function.
RETRACING = f"""\
MainThread (tid 1);<module> ({TRAIN}:90);loop ({TRAIN}:50);{TRACE};{AUTOGRAPH} 60
MainThread (tid 1);<module> ({TRAIN}:90);loop ({TRAIN}:50);{TRACE};decode ({TRAIN}:12) 5
MainThread (tid 1);<module> ({TRAIN}:90);loop ({TRAIN}:50);{GRAPH};{TRACE[len(GRAPH) + 1 :].split(";func_graph")[0]} 15
MainThread (tid 1);<module> ({TRAIN}:90);loop ({TRAIN}:50);{GRAPH} 100
MainThread (tid 1);<module> ({TRAIN}:90);main ({TRAIN}:80);{KERAS_FIT};{TRACE};{AUTOGRAPH.replace("train_step", "one_step_on_data")} 40
"""  # noqa: E501


def test_retracing_names_the_call_that_traced_the_function_the_finding_names():
    summary = summary_of(RETRACING)
    stacks = summary.python_stacks
    assert stacks.tracing_samples == 120
    assert [(s.function, s.line, s.traces, s.share) for s in stacks.tracing_calls] == [
        ("loop", 50, "train_step", 0.6667),  # samples past the graph's building count here too
        ("main", 80, "one_step_on_data", 0.3333),  # the user's call of fit that traced it
    ]
    retrace = finding("retracing")
    retrace.evidence = {"function": "train_step"}
    found = attribute(retrace, summary)
    assert [(s.file, s.line) for s in found.where] == [(TRAIN, 50)]
    assert found.recommendation.startswith("In your code: `loop` (train.py:50) calls `train_step`")
    other = finding("xla_recompilation")
    other.evidence = {"function": "another_fn"}  # traced by no call the stacks saw
    assert locate(other, summary) == []
    # tracing is no line of the loop's own Python
    assert stacks.loop_lines == [] and locate(finding("host_overhead"), summary) == []
