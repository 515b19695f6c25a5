"""The framework a capture names: the real GPU captures of tests/fixtures/gpu-captures/ (their
README says what ran), fresh TF 2.21 captures of Keras 3, Keras 2 (tf_keras) and plain TF jobs
made here, and Keras 3 on JAX, whose names are copied from a CPU capture (JAX 0.10.2, Keras
3.15.1) because this environment has no JAX to make one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from profiler_service.analysis.readers.framework import Framework, read_framework
from profiler_service.analysis.readers.xplane import read_xspace

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-captures"
FAMILIES = {
    # Keras 2 `fit` with a TensorBoard callback, TF 2.3-2.5: `__inference_train_function_...`.
    "aoberai-chess-engine/*/*.xplane.pb": Framework.KERAS2,
    "mholmeslinder-semi-supervised-cv/*/*.xplane.pb": Framework.KERAS2,
    # The BERT demo is TF Model Garden's custom loop (`__inference_train_single_step_318906`)
    # over a Keras model: no Keras train function.
    "tensorflow-profiler-gpu-multi-worker/*.xplane.pb": Framework.TENSORFLOW,
    "jax-h200/*/*.xplane.pb": Framework.JAX,
    "amd-tracelens-mi300x/*/*.xplane.pb": Framework.JAX,
}
FIXTURES = [
    pytest.param(path, framework, id=str(path.relative_to(CAPTURES)))
    for pattern, framework in FAMILIES.items()
    for path in sorted(CAPTURES.glob(pattern))
]


def parse(path: Path) -> Any:
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    return space


def test_every_family_has_captures():
    found = {pattern for pattern in FAMILIES if any(CAPTURES.glob(pattern))}
    assert found == set(FAMILIES)


@pytest.mark.parametrize(("path", "framework"), FIXTURES)
def test_each_fixture_capture_names_its_framework(path: Path, framework: Framework):
    assert read_framework(parse(path)) is framework
    assert read_framework(read_xspace(path)) is framework  # the sidecar's reader, without TF


def captured(logdir: Path, run: Callable[[], None]) -> Any:
    """The XSpace of one call of `run`, after a call that traced it as a job's first step does."""
    import tensorflow as tf

    run()
    tf.profiler.experimental.start(str(logdir))
    run()
    tf.profiler.experimental.stop()
    (capture,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    assert read_framework(read_xspace(capture)) is read_framework(parse(capture))
    return parse(capture)


def keras_fit(keras: Any) -> Callable[[], None]:
    import numpy as np

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).random((256, 8), dtype=np.float32)
    return lambda: model.fit(x, x[:, :1], batch_size=32, epochs=1, verbose=0)


def test_keras3_fit_on_tensorflow(tmp_path):
    import keras

    assert keras.__version__.startswith("3.")
    assert keras.backend.backend() == "tensorflow"
    assert read_framework(captured(tmp_path, keras_fit(keras))) is Framework.KERAS3_TENSORFLOW


def test_keras2_fit_through_tf_keras(tmp_path):
    import tf_keras  # the test extras install it

    assert read_framework(captured(tmp_path, keras_fit(tf_keras))) is Framework.KERAS2


@pytest.mark.parametrize("graph", [True, False], ids=["tf.function", "eager"])
def test_custom_loop_without_keras_is_tensorflow(tmp_path, graph: bool):
    import tensorflow as tf

    w = tf.Variable(tf.zeros((8, 1)))
    data = tf.data.Dataset.from_tensor_slices(tf.random.normal((256, 8))).batch(32)

    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ w - x[:, :1]) ** 2)
        w.assign_sub(0.01 * tape.gradient(loss, w))

    step = tf.function(train_step) if graph else train_step

    def run() -> None:
        for x in data:
            step(x)

    assert read_framework(captured(tmp_path, run)) is Framework.TENSORFLOW


def jax_space(hlo: bytes = b"", host: tuple[str, ...] = (), ops: tuple[str, ...] = ()) -> Any:
    """A JAX capture as JAX 0.10.2 wrote Keras 3.15's `fit` on CPU (names copied from one): the
    jitted step's module and its HLO on `/host:metadata`, the dispatch on `/host:CPU`, and op
    paths as a GPU plane names its kernels' ops."""
    space = xplane_pb2.XSpace()
    metadata = space.planes.add(name="/host:metadata")
    metadata.stat_metadata[1].MergeFrom(xplane_pb2.XStatMetadata(id=1, name="jax_version"))
    metadata.stat_metadata[2].MergeFrom(xplane_pb2.XStatMetadata(id=2, name="Hlo Proto"))
    metadata.stats.add(metadata_id=1, str_value="0.10.2")
    module = metadata.event_metadata[18]
    module.MergeFrom(xplane_pb2.XEventMetadata(id=18, name="jit_train_step(18)"))
    module.stats.add(metadata_id=2, bytes_value=hlo)
    cpu = space.planes.add(name="/host:CPU")
    for i, name in enumerate(("PjitFunction(train_step)", "ThunkExecutor::Execute", *host), 1):
        cpu.event_metadata[i].MergeFrom(xplane_pb2.XEventMetadata(id=i, name=name))
    gpu = space.planes.add(name="/device:GPU:0")
    for i, name in enumerate(("tf_op", *ops), 1):
        gpu.stat_metadata[i].MergeFrom(xplane_pb2.XStatMetadata(id=i, name=name))
    return space


def through_the_sidecar(space: Any, tmp_path: Path) -> Framework:
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return read_framework(read_xspace(path))


def test_keras3_on_jax_by_its_loss_scope_in_the_steps_hlo(tmp_path):
    keras = jax_space(hlo=b"\n\x05sub.3\x12(jit(train_step)/jvp(compile_loss)/mse/sub")
    assert read_framework(keras) is Framework.KERAS3_JAX
    # The sidecar's proto subset has no bytes stats: the HLO is not read there.
    assert through_the_sidecar(keras, tmp_path) is Framework.JAX


def test_a_plain_jax_step_of_the_same_name_is_jax():
    plain = jax_space(hlo=b"\n\x05dot.2\x12#jit(train_step)/jvp()/dot_general")
    assert read_framework(plain) is Framework.JAX


def test_keras3_on_jax_by_its_trainer_in_the_python_tracer(tmp_path):
    traced = jax_space(host=("$trainer.py:361 fit", "$trainer.py:880 jax_state_sync"))
    assert read_framework(traced) is Framework.KERAS3_JAX
    assert through_the_sidecar(traced, tmp_path) is Framework.KERAS3_JAX


def test_keras3_on_jax_by_its_loss_scope_in_gpu_op_paths(tmp_path):
    """Inferred: GPU planes name ops by such paths (`jit(dot)/dot_general` on the MI300X)."""
    gpu = jax_space(ops=("jit(train_step)/jvp(compile_loss)/mse/sub",))
    assert read_framework(gpu) is Framework.KERAS3_JAX
    assert through_the_sidecar(gpu, tmp_path) is Framework.KERAS3_JAX


def test_a_capture_without_host_names_is_unknown():
    space = xplane_pb2.XSpace()
    assert read_framework(space) is Framework.UNKNOWN
    gpu = space.planes.add(name="/device:GPU:0")
    gpu.event_metadata[1].MergeFrom(xplane_pb2.XEventMetadata(id=1, name="volta_sgemm_64x64_nn"))
    assert read_framework(space) is Framework.UNKNOWN


def test_labels_name_each_framework_for_a_report():
    assert Framework.KERAS3_JAX.label == "Keras 3 on JAX"
    assert Framework("keras2").label == "Keras 2 on TensorFlow"
    assert len({f.label for f in Framework}) == len(Framework)
