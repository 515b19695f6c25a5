"""TensorFlow's own pathologies as demo workloads, each with a healthy twin.

- `function`: a custom loop around one `tf.function`. `--arg python-number` passes a new Python
  float each step (a retrace every step), `--arg new-shapes` a new batch size each step, `--arg
  tensor` a tensor (traced once, before the first step). `--jit-compile` compiles it with XLA,
  so every new shape is also a new compilation; `--reduce-retracing` keeps one trace for them.
- `pipeline`: a plain-TF tf.data pipeline (no Python in it) that the model waits on.
  `--pipeline sequential`: a random-augmenting map, one element at a time, no prefetch;
  `tuned`: the same with `num_parallel_calls` and `prefetch`; `augment-after-decode`: an
  expensive deterministic decode, then a random augmentation, nothing cached between them;
  `deterministic`: the decode alone in a `map` without `num_parallel_calls`, no prefetch
  (tf.data parallelises such a map by itself).
- `xla-fit`: Keras `fit` with `jit_compile=True`; `--batches varying` gives each step a new
  batch size (up to 240 of them), `fixed` always 256: XLA compiles each new shape once.
- `temporaries`: each step stacks and concatenates slices into large temporaries, freed by the
  end of the step (the article's second case study, without the leak): `--temporaries-mb`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import tensorflow as tf

from profiler_service.steps import training_step

FEATURES = 64


def _loop(seconds: float, ready: dict, step: Callable[[int], object]) -> None:
    """Announce readiness after the first step; mark every step; stop after `seconds`."""
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        with training_step(i):
            step(i)
        if i == 0:
            print("READY " + json.dumps(ready), flush=True)
        i += 1


def function_loop(seconds: float, ready: dict, args: argparse.Namespace) -> None:
    """One tf.function called each step with the argument `--arg` says."""
    w = tf.Variable(tf.random.normal((256, 256)) * 0.01)
    x = tf.random.normal((64, 256))

    def step_fn(features, learning_rate):
        h = tf.nn.relu(tf.matmul(features, w))
        for _ in range(3):
            h = tf.nn.relu(tf.matmul(h, w))
        w.assign_sub(learning_rate * tf.reduce_mean(h) * tf.ones_like(w))
        return tf.reduce_sum(h)

    train_step = tf.function(
        step_fn, jit_compile=args.jit_compile or None, reduce_retracing=args.reduce_retracing
    )
    fixed_rate = tf.constant(1e-4)

    def step(i: int) -> object:
        if args.arg == "python-number":
            return train_step(x, 1e-4 / (1 + i))  # a new Python float: a new trace
        if args.arg == "new-shapes":
            return train_step(tf.random.normal((16 + i, 256)), fixed_rate)  # a new batch size
        return train_step(x, fixed_rate)

    ready["function"] = "step_fn"
    _loop(seconds, ready, step)


def _decode(i: tf.Tensor) -> tf.Tensor:
    """Deterministic and expensive: what a decoder of compressed records costs."""
    seed = tf.stack([i, tf.constant(0, tf.int64)])
    x = tf.random.stateless_normal((128, 128), seed=seed)
    for _ in range(3):
        x = tf.tanh(tf.matmul(x, x) * 0.01)
    return x[0, :FEATURES]


def _augment(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Random, so tf.data cannot parallelise or cache it by itself; adds the label."""
    return _label(x + tf.random.uniform((FEATURES,), 0.0, 0.01))


def _label(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return x, tf.reduce_sum(x, keepdims=True)


def _decode_and_augment(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return _augment(_decode(i))


def pipeline_dataset(kind: str, batch_size: int = 32) -> tf.data.Dataset:
    """A plain-TF input pipeline of the given kind (see the module's docstring) of (features,
    label) batches."""
    ds = tf.data.Dataset.range(1 << 40)
    if kind == "sequential":
        ds = ds.map(_decode_and_augment).batch(batch_size)
    elif kind == "tuned":
        ds = ds.map(_decode_and_augment, num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    elif kind == "deterministic":
        ds = ds.map(lambda i: _label(_decode(i))).batch(batch_size)
    else:
        ds = ds.map(_decode, num_parallel_calls=tf.data.AUTOTUNE).map(_augment)
        ds = ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    return ds


def batches_dataset(batches: str, batch_size: int = 256) -> tf.data.Dataset:
    """(features, label) batches of `batch_size`, or, `varying`, of 16 to 255 rows at random."""
    ds = tf.data.Dataset.range(1 << 40).map(lambda i: tf.random.normal((FEATURES,)))
    ds = ds.batch(batch_size)
    if batches == "varying":
        ds = ds.map(lambda x: x[: 16 + tf.random.uniform((), 0, batch_size - 16, tf.int32)])
    return ds.map(lambda x: (x, tf.reduce_sum(x, axis=1, keepdims=True))).prefetch(2)


def temporaries_loop(seconds: float, ready: dict, args: argparse.Namespace) -> None:
    """Each step builds `--temporaries-mb` of slices, stacks them and concatenates the stack
    with itself: every slice stays alive until the stack, the stack until the concat."""
    slices = 16
    rows = max(1, int(args.temporaries_mb * 2**20) // (4 * 256 * slices * 3))
    w = tf.Variable(tf.random.normal((256, 256)) * 0.01)

    @tf.function
    def train_step(x):
        parts = [tf.matmul(x + float(k), w) for k in range(slices)]
        stacked = tf.stack(parts)  # every part alive until here
        both = tf.concat([stacked, stacked * 2.0], axis=0)  # and the stack until here
        loss = tf.reduce_mean(both)
        w.assign_sub(1e-6 * loss * tf.ones_like(w))
        return loss

    x = tf.random.normal((rows, 256))
    ready["temporaries_bytes_per_step"] = rows * 256 * 4 * slices * 3
    _loop(seconds, ready, lambda i: train_step(x))
