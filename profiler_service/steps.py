"""Step markers for the training job: XProf's step-time analysis needs them.

Keras 3 `fit()` emits none by itself, so without these the overview page has no verdict
("No step marker observed"). Both helpers cost nothing measurable while no capture runs.

One marker wraps one call of the training function. With `steps_per_execution=N` (Keras) or a
custom step function that runs N batches, one call holds N training steps: the marker's
`step_num` is the index of the first of them, so consecutive markers are N apart and the
analysis (analysis/readers/step_markers.py) reads N from that gap and reports per-step figures.

Each call's wall time also feeds `profiler_training_steps_total` and
`profiler_training_step_duration_seconds` (exporters/step_collector.py), per training step, which
the embedded agent's `GET /metrics` exports. Beside a sidecar, which cannot see into this
process, `PROFILER_JOB_METRICS_PORT` makes the first marked step serve them on that port
(exporters/job_metrics.py) for the sidecar to read (PROFILER_JOB_METRICS_URL).
"""

from __future__ import annotations

import os
import sys
from time import perf_counter
from typing import Any

import tensorflow as tf
from tensorflow import keras

from profiler_service.probes.steps import STEP_STATS

__all__ = ["ProfilerStepCallback", "training_step"]

_metrics_checked = False  # whether PROFILER_JOB_METRICS_PORT was looked at in this process


def _serve_metrics_once() -> None:
    """At the first marked step: serve the step metrics when PROFILER_JOB_METRICS_PORT asks."""
    global _metrics_checked
    if _metrics_checked:
        return
    _metrics_checked = True
    if os.environ.get("PROFILER_JOB_METRICS_PORT"):
        from profiler_service.exporters.job_metrics import serve_from_environment

        serve_from_environment()


def _marker(name: str, step_num: int, examples: int | None) -> tf.profiler.experimental.Trace:
    """A step marker; with `examples`, a stat of that name the analysis reads
    (analysis/readers/step_markers.py: EXAMPLES)."""
    extra = {"examples": int(examples)} if examples else {}
    return tf.profiler.experimental.Trace(name, step_num=step_num, _r=1, **extra)


class _Step:
    """A step marker that also records the step's wall time."""

    __slots__ = ("_name", "_started", "_steps", "_trace")

    def __init__(self, step_num: int, name: str, steps: int = 1, examples: int | None = None):
        self._name = name
        self._steps = steps
        self._trace = _marker(name, step_num, examples)
        self._started = 0.0

    def __enter__(self) -> _Step:
        self._trace.__enter__()
        self._started = perf_counter()
        return self

    def __exit__(self, *exc_info) -> None:
        STEP_STATS.observe(perf_counter() - self._started, self._name, self._steps)
        self._trace.__exit__(*exc_info)


def training_step(
    step_num: int, name: str = "train", steps: int = 1, examples: int | None = None
) -> _Step:
    """Mark one call of a custom loop's step function: `with training_step(i): train_step(b)`.

    When the call runs several training steps (a `tf.function` looping over N batches), pass
    `steps=N` and number the calls by their first step, 0, N, 2N, ...: the analysis reads N
    from the gap between markers, and the metrics count N steps per call.

    `examples`: the examples one training step takes (its batch size). The trace carries no
    batch size of its own; with it, two captures whose batches differ are compared by time per
    example (across/comparability.py), so a smaller batch never reads as a fix.
    """
    _serve_metrics_once()
    return _Step(step_num, name, steps, examples)


def _fit_marks_steps(model: Any) -> bool:
    """Whether this model's `fit()` marks its own steps (Keras 2 does, `Trace('train', ...)`)."""
    for cls in type(model).__mro__:
        module = cls.__module__ or ""
        top = module.partition(".")[0]
        if top in ("keras", "tf_keras"):
            version = str(getattr(sys.modules.get(top), "__version__", "3"))
            return version.split(".")[0].isdigit() and int(version.split(".")[0]) < 3
        if top == "tensorflow" and ".keras" in module:  # tf.keras before Keras was split out
            return True
    return False


class ProfilerStepCallback(keras.callbacks.Callback):
    """Mark every `fit()` call of the train function: `model.fit(ds, callbacks=[...])`.

    Keras calls the batch hooks once per call of the train function, with the first and last
    batch index it ran (N apart under `steps_per_execution=N`): the marker's `step_num` is the
    first training step, and the metrics count every step. Under Keras 2 (tf_keras), whose
    `fit()` already wraps each call in its own step marker, this only feeds the metrics:
    a second marker around the same call would be a second step in XProf.

    `examples`: the examples one training step takes (`fit`'s `batch_size`; Keras tells a
    callback no batch size): see `training_step`.
    """

    def __init__(self, name: str = "train", examples: int | None = None):
        super().__init__()
        self.name = name
        self.examples = examples
        self.step = 0  # training steps marked so far: the next marker's step_num
        self._trace: tf.profiler.experimental.Trace | None = None
        self._begin = 0
        self._started = 0.0
        self._marks: bool | None = None

    def on_train_begin(self, logs=None):
        self._marks = not _fit_marks_steps(self.model)
        _serve_metrics_once()

    def on_train_batch_begin(self, batch, logs=None):
        if self._marks is None:  # on_train_begin not called (a custom loop calling the hooks)
            self._marks = not _fit_marks_steps(self.model)
            _serve_metrics_once()
        self._begin = batch
        if self._marks:
            self._trace = _marker(self.name, self.step, self.examples)
            self._trace.__enter__()
        self._started = perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        elapsed = perf_counter() - self._started
        steps = self._steps_run(batch)
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
        STEP_STATS.observe(elapsed, self.name, steps)
        self.step += steps

    # tf_keras's CallbackList asks these of every callback; Keras 3's Callback lacks them, so
    # the same callback also serves a `tf_keras` model without TF_USE_LEGACY_KERAS.
    def _implements_train_batch_hooks(self) -> bool:
        return True

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False

    def _steps_run(self, end: int) -> int:
        """Batches `begin..end` of this call; Keras 3 names a full call's last batch even when
        the epoch ends sooner, so the epoch's batch count bounds it."""
        per_epoch = (self.params or {}).get("steps")
        if isinstance(per_epoch, int) and per_epoch > 0:
            end = min(end, per_epoch - 1)
        return max(1, end - self._begin + 1)
