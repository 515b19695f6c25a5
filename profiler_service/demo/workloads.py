"""The demo job's TensorFlow workloads (profiler_service.demo.job runs them): an input-bound Keras
job (Python decoding, as in the article), a compute-bound one, an eager loop, a multi-worker
loop and a memory loop; the TensorFlow pathologies are in tf_pathologies.py.

Importing this module imports TensorFlow: job.py starts the profiler agent before it does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import tensorflow as tf
from tensorflow import keras

from profiler_service.demo import tf_pathologies
from profiler_service.steps import ProfilerStepCallback, training_step

FEATURES = 64
FEATURES_MEMORY = 256  # one row of float32 is 1 KiB


DECODE_S = 0.002  # per record; --decode-ms makes a deliberately slower reader


def _python_decode(_index):
    """Decoding in pure Python, one record at a time: the accelerator waits on this."""
    time.sleep(DECODE_S)
    return np.random.default_rng().random(FEATURES, dtype=np.float32)


def input_bound_dataset(batch_size: int = 32, fixed: bool = False) -> tf.data.Dataset:
    """Per-sample Python decoding through tf.numpy_function; no parallelism, no prefetch.
    `fixed`: its twin as the input_bound finding advises, the decoding still Python but mapped
    in parallel (`num_parallel_calls=AUTOTUNE`) and prefetched."""
    parallel = tf.data.AUTOTUNE if fixed else None
    ds = tf.data.Dataset.range(1 << 40).map(
        lambda i: tf.ensure_shape(tf.numpy_function(_python_decode, [i], tf.float32), [FEATURES]),
        num_parallel_calls=parallel,
    )
    ds = ds.map(lambda x: (x, tf.reduce_sum(x, keepdims=True))).batch(batch_size)
    return ds.prefetch(tf.data.AUTOTUNE) if fixed else ds


COMPUTE_BOUND_BATCH = 512


def compute_bound_dataset(batch_size: int = COMPUTE_BOUND_BATCH) -> tf.data.Dataset:
    x = tf.random.normal((batch_size, FEATURES))
    return tf.data.Dataset.from_tensors((x, tf.reduce_sum(x, axis=1, keepdims=True))).repeat()


def build_model(width: int, steps_per_execution: int = 1) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse", steps_per_execution=steps_per_execution)
    return model


class _Clock(keras.callbacks.Callback):
    """The job's own clock: a line `time_ns steps` after every call of the train function
    (steps finished so far), for checking the snapshot's step figures against."""

    def __init__(self, path: str):
        super().__init__()
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 (line-buffered, closed at end)
        self.steps = 0
        self.begin = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.begin = batch

    def on_train_batch_end(self, batch, logs=None):
        self.steps += batch - self.begin + 1
        self.file.write(f"{time.time_ns()} {self.steps}\n")

    def on_train_end(self, logs=None):
        self.file.close()


class _Deadline(keras.callbacks.Callback):
    """Announce readiness after the first step; stop training after `seconds`."""

    def __init__(self, seconds: float, ready: dict):
        super().__init__()
        self.end = time.monotonic() + seconds
        self.ready = ready
        self.announced = False

    def on_train_batch_end(self, batch, logs=None):
        if not self.announced:
            print("READY " + json.dumps(self.ready), flush=True)
            self.announced = True
        if time.monotonic() > self.end:
            self.model.stop_training = True


def multi_worker_loop(seconds: float, ready: dict, extra_matmuls: int = 0) -> None:
    """One worker of a MultiWorkerMirroredStrategy job; the cluster comes from TF_CONFIG.

    Gradients are all-reduced every step, so a worker given more work per step
    (--extra-matmuls) is the straggler the others wait for. A plain custom loop: Keras 3's fit()
    does not run under this strategy here.

    Profile it through the worker's own cluster address (TF_CONFIG): TF's distributed gRPC
    server already serves the profiler. A second server from --profiler-port, traced, crashed
    a worker of this job within one to three captures on TF 2.21 ("double free or corruption").
    """
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    x = tf.random.normal((64, FEATURES))
    dataset = tf.data.Dataset.from_tensors((x, tf.reduce_sum(x, axis=1, keepdims=True)))
    dataset = dataset.repeat().with_options(options)
    with strategy.scope():
        w = tf.Variable(tf.random.normal((FEATURES, 1)))
    batches = iter(strategy.experimental_distribute_dataset(dataset))
    busy = tf.random.normal((384, 384))

    @tf.function
    def train_step(batch):
        def replica_step(inputs):
            features, labels = inputs
            extra = busy + tf.reduce_mean(features)  # depends on the step: not constant-folded
            for _ in range(extra_matmuls):  # unrolled: this worker's own, slower compute
                extra = tf.tanh(tf.matmul(extra, busy))
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - labels))
                loss += 0.0 * tf.reduce_mean(extra)  # keeps the extra work in the graph
            grad = tf.distribute.get_replica_context().all_reduce("SUM", tape.gradient(loss, w))
            w.assign_sub(0.0001 * grad)
            return loss

        return strategy.run(replica_step, args=(batch,))

    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        with training_step(step):
            train_step(next(batches))
        if step == 0:
            print("READY " + json.dumps(ready), flush=True)
        step += 1


def eager_loop(seconds: float, ready: dict, graph: bool = False) -> None:
    """A custom loop of tiny ops run eagerly, one Python dispatch per op (no tf.function).
    `graph`: its twin as the eager_execution finding advises, the step in a tf.function."""
    x = tf.random.normal((8, FEATURES))
    w = tf.Variable(tf.random.normal((FEATURES, FEATURES)))

    def train_step() -> None:
        for _ in range(20):
            y = tf.nn.relu(tf.matmul(x, w)) + 1.0
            w.assign_sub(0.0001 * tf.reduce_mean(y) * tf.ones_like(w))

    run = tf.function(train_step) if graph else train_step
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        with training_step(step):
            run()
        if step == 0:
            print("READY " + json.dumps(ready), flush=True)
        step += 1


def memory_loop(seconds: float, ready: dict, args: argparse.Namespace) -> None:
    """A custom loop whose memory the flags shape: `--leak-kb-per-step` keeps each step's
    activation in a Python list (the article's second case study), `--resident-mb` holds a large
    steady footprint, `--scratch-mb` allocates and frees a temporary inside every step (a
    sawtooth). `--oom-growth-mb` stands in for the kernel's OOM killer: once the RSS has grown
    that much past its size before training (`ready["oom_at_bytes"]`), the process dies at once
    with 137. `--stats-file` gets a JSON line of the job's own figures each
    second."""
    import os

    import psutil

    rows = max(1, round(args.leak_kb_per_step))  # one row of FEATURES_MEMORY floats is 1 KiB
    w = tf.Variable(tf.random.normal((FEATURES_MEMORY, FEATURES_MEMORY)) * 0.01)
    resident = tf.Variable(tf.zeros((int(args.resident_mb * 2**20) // 4,)))
    scratch_rows = int(args.scratch_mb * 2**20) // (4 * FEATURES_MEMORY)

    @tf.function
    def train_step(x):
        h = tf.nn.relu(tf.matmul(x, w))  # the activation a careless loop keeps
        loss = tf.reduce_mean(h)
        if scratch_rows:
            t = tf.random.uniform((scratch_rows, FEATURES_MEMORY))
            loss += 0.0 * tf.reduce_sum(t * t)
        w.assign_sub(0.0001 * loss * tf.ones_like(w))
        return loss, h

    kept: list = []
    process = psutil.Process()
    kept_bytes, step, last_write = 0, 0, 0.0
    oom_at = ready.get("oom_at_bytes") or float("inf")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with training_step(step):
            _, h = train_step(tf.random.normal((rows, FEATURES_MEMORY)))
            if args.leak_kb_per_step:
                kept.append(h)
                kept_bytes += h.shape.num_elements() * 4
            time.sleep(args.step_ms / 1000)
        if step == 0:
            ready["leak_bytes_per_step"] = kept_bytes
            print("READY " + json.dumps(ready), flush=True)
        step += 1
        rss = process.memory_info().rss
        if args.stats_file and (time.monotonic() - last_write >= 1.0 or rss > oom_at):
            last_write = time.monotonic()
            stats = {"time": time.time(), "steps": step, "kept_bytes": kept_bytes, "rss": rss}
            with open(args.stats_file, "a") as f:
                f.write(json.dumps(stats) + "\n")
        if rss > oom_at:
            print(f"OOM rss={rss} at {time.time():.3f}", flush=True)
            os._exit(137)
    print(f"resident {resident.shape.num_elements() * 4} bytes", flush=True)


def run(args: argparse.Namespace, ready: dict) -> None:
    """Train the workload `args.workload` until `args.seconds` pass; `ready` goes in its
    `READY {json}` line once the first step is done."""
    if args.workload in ("function", "temporaries"):
        loop = tf_pathologies.function_loop
        if args.workload == "temporaries":
            loop = tf_pathologies.temporaries_loop
        loop(args.seconds, ready, args)
        print("DONE", flush=True)
        return
    if args.workload in ("eager", "multi-worker", "memory"):
        if args.workload == "eager":
            eager_loop(args.seconds, ready, graph=args.fixed)
        elif args.workload == "memory":
            memory_loop(args.seconds, ready, args)
        else:
            multi_worker_loop(args.seconds, ready, args.extra_matmuls)
        print("DONE", flush=True)
        return
    n = args.steps_per_execution
    examples = None  # a step's batch, where it is one size: the step markers carry it
    if args.workload == "input-bound":
        examples = args.batch_size
        dataset = input_bound_dataset(args.batch_size, fixed=args.fixed)
        model = build_model(width=64, steps_per_execution=n)
    elif args.workload == "pipeline":
        dataset, model = tf_pathologies.pipeline_dataset(args.pipeline), build_model(width=64)
    elif args.workload == "xla-fit":
        dataset, model = tf_pathologies.batches_dataset(args.batches), build_model(width=64)
        model.compile(optimizer="adam", loss="mse", jit_compile=True)
    else:
        dataset, model = compute_bound_dataset(), build_model(width=1024, steps_per_execution=n)
        examples = COMPUTE_BOUND_BATCH
    callbacks = [ProfilerStepCallback(examples=examples), _Deadline(args.seconds, ready)]
    if args.clock_file:
        callbacks.append(_Clock(args.clock_file))
    model.fit(dataset, epochs=1, steps_per_epoch=10**9, verbose=0, callbacks=callbacks)
    print("DONE", flush=True)
    sys.exit(0)
