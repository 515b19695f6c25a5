"""The call that wires the user's Python into tf.data, read from the user's own source."""

from __future__ import annotations

from profiler_service.analysis.models import Finding, Severity, Summary
from profiler_service.analysis.readers.pipeline_source import find_wiring
from profiler_service.analysis.readers.python_stacks import read_stacks, summarise
from profiler_service.analysis.where import attribute

TRAIN = '''\
import tensorflow as tf


def decode(record):
    return record


def gen():
    yield 1


def build(paths):
    ds = tf.data.Dataset.from_tensor_slices(paths)
    ds = ds.map(lambda p: tf.py_function(func=decode, inp=[p], Tout=tf.float32))
    other = tf.data.Dataset.from_generator(gen, output_signature=None)
    return ds.map(lambda p: tf.numpy_function(decode, [p], tf.float32)), other
'''


def test_the_first_call_that_wires_a_function_is_found_by_its_name(tmp_path):
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    found = find_wiring("decode", [str(train)])
    assert (found.line, found.code) == (
        14,
        "ds = ds.map(lambda p: tf.py_function(func=decode, inp=[p], Tout=tf.float32))",
    )
    assert find_wiring("Loader.gen", [str(train)]).line == 15  # a method's own name
    assert find_wiring("build", [str(train)]) is None  # called, never wired
    assert find_wiring("<lambda>", [str(train)]) is None
    assert find_wiring("decode", [str(tmp_path / "gone.py")]) is None  # a sidecar's view


def test_input_bound_names_the_line_to_change(tmp_path):
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    site = "/venv/lib/python3.11/site-packages"
    folded = (
        f"thread (tid 7);FuncRegistry.__call__ ({site}/tensorflow/python/ops/script_ops.py:268);"
        f"decode ({train}:5) 40\n"
    )
    stacks = summarise(read_stacks(folded), [site])
    stacks.pipeline_functions[0].wired_at = find_wiring("decode", [str(train)])
    finding = Finding(
        rule="input_bound", severity=Severity.CRITICAL, title="t", recommendation="Fix it."
    )
    found = attribute(finding, Summary(python_stacks=stacks))
    assert found.recommendation.startswith(
        "In your code: `decode` (train.py:5) is the Python your tf.data pipeline runs (100% of "
        "its samples there), wired into it at train.py:14 (`ds = ds.map(lambda p: "
        "tf.py_function(func=decode, inp=[p], Tout=tf.float32))`)."
    )
