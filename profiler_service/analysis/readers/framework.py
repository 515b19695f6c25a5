"""Which framework ran the job, read from the names a capture declares.

The advice a capture gets depends on what wrote it (a Keras `fit`, a custom TF loop, JAX), and
no field of an XSpace says so. Each plane declares the names its events and stats use
(`event_metadata`, `stat_metadata`), thousands where a capture holds millions of events, so
these are read and the events themselves are not. First rule that holds wins:

- `keras3-jax`: a JAX capture (below) whose `jit_train_step` / `jit_test_step` module, on the
  `/host:metadata` plane, has Keras's `compile_loss` name scope in its HLO (Keras 3 enters
  `jax.named_scope` for each of its name scopes and jits `Trainer.train_step`); or, with the
  Python tracer on, the frames of Keras 3's JAX trainer (`$trainer.py:880 jax_state_sync`,
  `... _get_jax_state`). A plain JAX step of the same name has no such scope. The HLO is a
  bytes stat, which the sidecar's proto subset (xplane.py) does not declare; a GPU plane that
  names its kernels' ops (`jit(dot)/dot_general` in the MI300X captures) would show the scope
  in an op path `jit(train_step)/.../compile_loss/...`, a cue inferred, not seen on a Keras
  capture. Read through the subset without either, such a capture is `jax`.
- `jax`: a `PjitFunction(<name>)` event, JAX's jit dispatch (seen in JAX 0.8, 0.10, 0.11), or
  a `jax_version` stat on `/host:metadata` (0.10 and 0.11 write it, 0.8 does not). Checked
  before TensorFlow's markers, which a JAX job reading a tf.data pipeline would also show.
- `keras3-tensorflow`: a tf.function of Keras 3's TF trainer, by its call event
  (`multi_step_on_iterator`), its concrete function (`__inference_multi_step_on_iterator_853`)
  or its XLA module (`a_inference_one_step_on_data_817__.5` under `jit_compile`). Earlier Keras 3
  releases named the steps-per-execution=1 function `one_step_on_iterator` (from their source;
  not seen in a capture).
- `keras2`: Keras 2's `train_function` / `test_function` / `predict_function`, by call event
  or as `__inference_train_function_1167` (tf.keras up to TF 2.15, tf_keras after).
- `tensorflow`: TensorFlow's runtime without a Keras function: `ExecutorState::Process`,
  `EagerExecute...`/`EagerLocalExecute...`, `TFE_Py_FastPathExecute_C`, the `tf_function_call`
  stat, or any `__inference_` name (a worker of a multi-worker job sees only the graphs it runs,
  as `tf_op` values). A Keras model trained by a custom loop is this too.
- `unknown`: none of these.

Checked on: tests/fixtures/gpu-captures/ (the aoberai-chess-engine and mholmeslinder runs:
Keras 2 `fit` on TF 2.3-2.5, `train_function`; the V100 multi-worker BERT demo: TF Model
Garden's custom loop, `__inference_train_single_step_318906` with `AdamWeightDecay`, hence
`tensorflow`; jax-h200: JAX 0.11.2; amd-tracelens-mi300x: JAX 0.8 on ROCm), and on CPU
captures made with TF 2.21 (Keras 3.15 `fit` with and without `jit_compile`, tf_keras 2.21
`fit`, a custom loop in a `tf.function`, an eager loop), TF 2.15 (Keras 2.15 `fit`) and JAX
0.10.2 (Keras 3.15 `fit` on JAX, Python tracer on and off; a plain jitted `train_step`).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any


class Framework(StrEnum):
    """What ran the captured job; the value is what reports and metrics carry."""

    TENSORFLOW = "tensorflow"
    KERAS2 = "keras2"
    KERAS3_TENSORFLOW = "keras3-tensorflow"
    KERAS3_JAX = "keras3-jax"
    JAX = "jax"
    UNKNOWN = "unknown"

    @property
    def label(self) -> str:
        """The name a person reads in a report."""
        return _LABELS[self]


_LABELS = {
    Framework.TENSORFLOW: "TensorFlow",
    Framework.KERAS2: "Keras 2 on TensorFlow",
    Framework.KERAS3_TENSORFLOW: "Keras 3 on TensorFlow",
    Framework.KERAS3_JAX: "Keras 3 on JAX",
    Framework.JAX: "JAX",
    Framework.UNKNOWN: "unknown",
}


def _functions(*names: str) -> re.Pattern[str]:
    """A tf.function's call event (its Python name) or its concrete function / XLA module
    (`__inference_<name>_<n>`, `a_inference_<name>_<n>__`) inside any longer name."""
    return re.compile(rf"(?:^|_inference_)(?:{'|'.join(names)})(?:_\d+|$)")


_KERAS3_TF = _functions(
    "multi_step_on_iterator", "one_step_on_iterator", "one_step_on_data", "multi_step_on_data"
)
_KERAS2 = _functions("train_function", "test_function", "predict_function")
_TF_EVENTS = ("ExecutorState::Process", "EagerExecute", "EagerLocalExecute", "TFE_Py_")
# Keras 3's JAX trainer in the Python tracer's frames (`$trainer.py:880 jax_state_sync`).
_KERAS3_JAX_FRAME = re.compile(r"^\$\S+ (?:jax_state_sync|_get_jax_state)$")
_KERAS3_JAX_STEPS = ("jit_train_step(", "jit_test_step(")
_KERAS3_JAX_OP = re.compile(r"^jit\((?:train|test)_step\)/.*compile_loss")
_KERAS3_LOSS_SCOPE = b"compile_loss"


def read_framework(space: Any) -> Framework:
    """The framework of the job that wrote `space` (an XSpace: TF's `xplane_pb2` or the
    sidecar's `read_xspace`), from its declared names; see the module's docstring."""
    events: set[str] = set()
    stats: set[str] = set()
    for plane in space.planes:
        events.update(m.name for m in plane.event_metadata.values())
        stats.update(m.name for m in plane.stat_metadata.values())
    if "jax_version" in stats or any(n.startswith("PjitFunction(") for n in events):
        keras = (
            any(_KERAS3_JAX_FRAME.match(n) for n in events)
            or any(_KERAS3_JAX_OP.match(n) for n in stats)
            or _keras_loss_in_hlo(space)
        )
        return Framework.KERAS3_JAX if keras else Framework.JAX
    names = events | stats
    if any(_KERAS3_TF.search(n) for n in names):
        return Framework.KERAS3_TENSORFLOW
    if any(_KERAS2.search(n) for n in names):
        return Framework.KERAS2
    if (
        "tf_function_call" in stats
        or any(n.startswith(_TF_EVENTS) for n in events)
        or any("__inference_" in n for n in names)
    ):
        return Framework.TENSORFLOW
    return Framework.UNKNOWN


def _keras_loss_in_hlo(space: Any) -> bool:
    """Whether a jitted Keras step's HLO (a bytes stat of its module on `/host:metadata`) holds
    Keras 3's `compile_loss` scope: only those modules are searched, not every program."""
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        for module in plane.event_metadata.values():
            if module.name.startswith(_KERAS3_JAX_STEPS) and any(
                _KERAS3_LOSS_SCOPE in getattr(stat, "bytes_value", b"") for stat in module.stats
            ):
                return True
    return False
