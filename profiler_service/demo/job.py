"""A small real TF job: input-bound (Python decoding, as in the article), compute-bound, or eager.

    python -m profiler_service.demo.job --workload input-bound --agent --store ./profiles
    python -m profiler_service.demo.job --workload compute-bound --profiler-port 6009

Prints one line `READY {json}` once training has started (with the agent's URL when embedded),
then trains until --seconds pass or it is stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import tensorflow as tf
from tensorflow import keras

from profiler_service.steps import ProfilerStepCallback, training_step

FEATURES = 64


DECODE_S = 0.002  # per record; --decode-ms makes a deliberately slower reader


def _python_decode(_index):
    """Decoding in pure Python, one record at a time: the accelerator waits on this."""
    time.sleep(DECODE_S)
    return np.random.default_rng().random(FEATURES, dtype=np.float32)


def input_bound_dataset(batch_size: int = 32) -> tf.data.Dataset:
    """Per-sample Python decoding through tf.numpy_function; no parallelism, no prefetch."""
    ds = tf.data.Dataset.range(1 << 40).map(
        lambda i: tf.ensure_shape(tf.numpy_function(_python_decode, [i], tf.float32), [FEATURES])
    )
    return ds.map(lambda x: (x, tf.reduce_sum(x, keepdims=True))).batch(batch_size)


def compute_bound_dataset(batch_size: int = 512) -> tf.data.Dataset:
    x = tf.random.normal((batch_size, FEATURES))
    return tf.data.Dataset.from_tensors((x, tf.reduce_sum(x, axis=1, keepdims=True))).repeat()


def build_model(width: int) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


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


def eager_loop(seconds: float, ready: dict) -> None:
    """A custom loop of tiny ops run eagerly, one Python dispatch per op (no tf.function)."""
    x = tf.random.normal((8, FEATURES))
    w = tf.Variable(tf.random.normal((FEATURES, FEATURES)))
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        with training_step(step):
            for _ in range(20):
                y = tf.nn.relu(tf.matmul(x, w)) + 1.0
                w.assign_sub(0.0001 * tf.reduce_mean(y) * tf.ones_like(w))
        if step == 0:
            print("READY " + json.dumps(ready), flush=True)
        step += 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload",
        choices=["input-bound", "compute-bound", "eager", "multi-worker"],
        default="input-bound",
    )
    parser.add_argument("--seconds", type=float, default=600, help="stop training after this long")
    parser.add_argument("--profiler-port", type=int, help="start TF's profiler server on this port")
    parser.add_argument("--agent", action="store_true", help="embed the profiler agent")
    parser.add_argument("--agent-port", type=int, default=0, help="agent port (0: any free port)")
    parser.add_argument("--store", default="./profiles", help="agent's snapshot store")
    parser.add_argument("--decode-ms", type=float, default=2.0, help="input-bound: ms per record")
    parser.add_argument("--extra-matmuls", type=int, default=0, help="multi-worker: extra work")
    args = parser.parse_args(argv)
    global DECODE_S
    DECODE_S = args.decode_ms / 1000

    ready: dict = {"pid": __import__("os").getpid()}
    if args.profiler_port:
        tf.profiler.experimental.server.start(args.profiler_port)
        ready["profiler_port"] = args.profiler_port
    if args.agent:
        from profiler_service import agent

        embedded = agent.start(port=args.agent_port, store=args.store)
        ready["agent_url"] = embedded.url
    if args.workload in ("eager", "multi-worker"):
        if args.workload == "eager":
            eager_loop(args.seconds, ready)
        else:
            multi_worker_loop(args.seconds, ready, args.extra_matmuls)
        print("DONE", flush=True)
        return
    if args.workload == "input-bound":
        dataset, model = input_bound_dataset(), build_model(width=64)
    else:
        dataset, model = compute_bound_dataset(), build_model(width=1024)
    model.fit(
        dataset,
        epochs=1,
        steps_per_epoch=10**9,
        verbose=0,
        callbacks=[ProfilerStepCallback(), _Deadline(args.seconds, ready)],
    )
    print("DONE", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
