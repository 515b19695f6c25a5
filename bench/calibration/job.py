"""One member of the calibration family: a Keras job whose tf.data pipeline is built from its
arguments, with the profiler agent embedded (so each snapshot knows the job's cores).

Each element is a feature vector made from its index by `--rounds` rounds of x = sin(x) * 1.01
+ 0.5 over `FEATURES` values, done by:
  python-cpu    a Python loop (tf.py_function), computing under the GIL;
  python-sleep  numpy after a `--sleep-ms` wait (tf.numpy_function), like a read from storage;
  python-numpy  numpy on `NUMPY_SIDE` x FEATURES values (tf.numpy_function): native code that
                releases the GIL, as image decoding with PIL or OpenCV does;
  tf            TensorFlow ops on a whole batch (what "move the Python into TF ops" gives);
  tf-element    TensorFlow ops on each element, then batched: with `--sequential`, tf.data's own
                map parallelisation is off, so the map runs one element at a time.
`--parallel` maps with num_parallel_calls=AUTOTUNE, `--prefetch` ends with prefetch(AUTOTUNE),
`--cores N` pins the job to N cores before TensorFlow starts, `--width` sizes the model.
`--slower-file PATH`: once PATH exists, python-sleep waits `--slower-by` longer an element (the
same process made slower, for bench_verification's pairs that do not restart).

    python bench/calibration/job.py --decode python-cpu --rounds 40 --agent-port 0 --seconds 60
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from family import StepClock, add_job_args, start_agent

FEATURES = 64
NUMPY_SIDE = 64  # python-numpy: rows of FEATURES values, enough for numpy to release the GIL


class SlowerSwitch:
    """1, or `factor` once `path` exists (looked for at most every 0.2 s)."""

    def __init__(self, path: str | None, factor: float) -> None:
        self.path, self.slower, self.on, self.looked = path, factor, False, 0.0

    def factor(self) -> float:
        if self.path and not self.on and time.monotonic() - self.looked > 0.2:
            self.looked = time.monotonic()
            self.on = os.path.exists(self.path)
        return self.slower if self.on else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--decode",
        choices=("python-cpu", "python-sleep", "python-numpy", "tf", "tf-element"),
        required=True,
    )
    parser.add_argument("--rounds", type=int, default=40, help="work per element")
    parser.add_argument("--sleep-ms", type=float, default=1.0, help="python-sleep: wait each")
    parser.add_argument("--slower-file", help="python-sleep: wait longer once this file exists")
    parser.add_argument("--slower-by", type=float, default=0.1, help="that much longer")
    parser.add_argument("--parallel", action="store_true")
    parser.add_argument("--prefetch", action="store_true")
    parser.add_argument(
        "--sequential", action="store_true", help="tf.data's map parallelisation off"
    )
    add_job_args(parser)
    args = parser.parse_args()
    embedded = start_agent(args)  # before TensorFlow
    import keras
    import numpy as np
    import tensorflow as tf

    from profiler_service.steps import ProfilerStepCallback

    rounds = args.rounds

    def python_cpu(index):
        x = [((int(index) * 7919 + i) % 1000) / 1000.0 for i in range(FEATURES)]
        for _ in range(rounds):
            x = [math.sin(v) * 1.01 + 0.5 for v in x]
        return np.asarray(x, dtype=np.float32)

    slower = SlowerSwitch(args.slower_file, 1 + args.slower_by)

    def python_sleep(index):
        time.sleep(args.sleep_ms * slower.factor() / 1000)
        return np.random.default_rng(int(index)).random(FEATURES, dtype=np.float32)

    def python_numpy(index):
        rows = np.arange(NUMPY_SIDE * FEATURES, dtype=np.float64).reshape(NUMPY_SIDE, FEATURES)
        x = ((rows + int(index) * 7919) % 1000) / 1000.0
        for _ in range(rounds):
            x = np.sin(x) * 1.01 + 0.5
        return x.mean(axis=0).astype(np.float32)

    def tf_ops(indices):  # a batch at once: what a port of the decoding to TF ops does
        columns = tf.range(FEATURES, dtype=tf.int64)[None, :]
        x = tf.cast((indices[:, None] * 7919 + columns) % 1000, tf.float32) / 1000
        for _ in range(rounds):
            x = tf.sin(x) * 1.01 + 0.5
        return x

    def element(index):
        if args.decode == "tf-element":
            return tf_ops(index[None])[0]
        if args.decode == "python-cpu":
            out = tf.py_function(python_cpu, [index], tf.float32)
        else:
            decode = python_numpy if args.decode == "python-numpy" else python_sleep
            out = tf.numpy_function(decode, [index], tf.float32)
        return tf.ensure_shape(out, [FEATURES])

    parallel = tf.data.AUTOTUNE if args.parallel else None
    ds = tf.data.Dataset.range(10**9)
    if args.decode == "tf":
        ds = ds.batch(args.batch).map(tf_ops, num_parallel_calls=parallel)
        ds = ds.map(lambda x: (x, tf.reduce_sum(x, axis=1, keepdims=True)))
    else:
        ds = ds.map(element, num_parallel_calls=parallel)
        ds = ds.map(lambda x: (x, tf.reduce_sum(x, keepdims=True))).batch(args.batch)
    if args.prefetch:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    if args.sequential:
        options = tf.data.Options()
        options.experimental_optimization.map_parallelization = False
        ds = ds.with_options(options)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    end = time.monotonic() + args.seconds

    clock = StepClock(embedded.url)

    class Ready(keras.callbacks.Callback):
        """The job's own clock of its steps; stops training after `--seconds`."""

        def on_train_batch_end(self, batch, logs=None):
            clock.tick()
            if time.monotonic() > end:
                self.model.stop_training = True

    model.fit(ds, epochs=1, steps_per_epoch=10**9, verbose=0,
              callbacks=[ProfilerStepCallback(), Ready()])  # fmt: skip
    sys.exit(0)


if __name__ == "__main__":
    main()
