"""One member of the step family of the calibration corpus: a custom training loop whose step is
built from its arguments, with the profiler agent embedded (so each snapshot knows the job's
cores) and each step marked (`training_step`).

  eager    `--ops` rounds of a matmul, a relu and an add on a `--batch` x `--width` input, run
           eagerly, one Python dispatch per op; `--graph` (its fix, as eager_execution advises)
           runs the same step as one tf.function.
  retrace  a tf.function of `--layers` matmuls of `--width`, called with a new Python float
           every `--retrace-every` steps (a new trace each time); `--tensor-arg` (its fix, as
           retracing advises) passes the rate as a tensor: one trace.
  xla      the same matmuls as an XLA function (`jit_compile=True`) on a batch whose rows
           change every `--recompile-every` steps, between half of `--batch` and `--batch` (a
           new shape: a new trace and a new compilation, until the sizes run out);
           `--relaxed` traces it once (`reduce_retracing=True`), so only XLA compiles again;
           `--padded` (its fix, as xla_recompilation advises) pads every batch to `--batch`
           rows: one shape, one compilation, and the padding's compute.

`--cores N` pins the job to N cores before TensorFlow starts. Once training, it prints READY
with the agent's URL, then each second "CLOCK steps seconds": the steps its own clock counted.

    python bench/calibration/step_job.py --mode eager --ops 20 --store /tmp/s --seconds 60
"""

from __future__ import annotations

import argparse
import sys
import time

from family import StepClock, add_job_args, start_agent

SIZE_STRIDE = 37  # xla: the batch's rows change by this much (mod half the batch) a new shape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("eager", "retrace", "xla"), required=True)
    parser.add_argument("--ops", type=int, default=20, help="eager: rounds of ops a step")
    parser.add_argument("--graph", action="store_true", help="eager: the step in a tf.function")
    parser.add_argument("--layers", type=int, default=4, help="retrace: matmuls a step")
    parser.add_argument("--retrace-every", type=int, default=1, help="retrace: steps a trace")
    parser.add_argument("--tensor-arg", action="store_true", help="retrace: one trace")
    parser.add_argument("--recompile-every", type=int, default=1, help="xla: steps a shape")
    parser.add_argument("--relaxed", action="store_true", help="xla: one trace, shapes vary")
    parser.add_argument("--padded", action="store_true", help="xla: one shape")
    add_job_args(parser)
    args = parser.parse_args()
    embedded = start_agent(args)  # before TensorFlow
    import tensorflow as tf

    from profiler_service.steps import training_step

    x = tf.random.normal((args.batch, args.width))
    w = tf.Variable(tf.random.normal((args.width, args.width)) * 0.01)

    if args.mode == "eager":

        def eager_step() -> None:
            for _ in range(args.ops):
                y = tf.nn.relu(tf.matmul(x, w)) + 1.0
                w.assign_sub(0.0001 * tf.reduce_mean(y) * tf.ones_like(w))

        run = tf.function(eager_step) if args.graph else eager_step

        def step(i: int) -> None:
            run()

    elif args.mode == "xla":

        def xla_step(features):
            h = features
            for _ in range(args.layers):
                h = tf.nn.relu(tf.matmul(h, w))
            w.assign_sub(1e-4 * tf.reduce_mean(h) * tf.ones_like(w))
            return tf.reduce_sum(h)

        compiled = tf.function(xla_step, jit_compile=True, reduce_retracing=args.relaxed)
        full = tf.random.normal((args.batch, args.width))
        sizes = args.batch - args.batch // 2

        def rows(i: int) -> int:
            """Every size between half the batch and the batch, in a scattered order."""
            return args.batch - ((i // args.recompile_every) * SIZE_STRIDE) % sizes

        def step(i: int) -> None:
            n = rows(i)
            if args.padded:  # the real rows, then zeros up to the full batch
                compiled(tf.pad(full[:n], [[0, args.batch - n], [0, 0]]))
            else:
                compiled(full[:n])

    else:

        @tf.function
        def train_step(features, learning_rate):
            h = features
            for _ in range(args.layers):
                h = tf.nn.relu(tf.matmul(h, w))
            w.assign_sub(learning_rate * tf.reduce_mean(h) * tf.ones_like(w))
            return tf.reduce_sum(h)

        def step(i: int) -> None:
            rate = 1e-4 / (1 + i // args.retrace_every)  # a new Python float: a new trace
            train_step(x, tf.constant(rate) if args.tensor_arg else rate)

    clock = StepClock(embedded.url)
    end = time.monotonic() + args.seconds
    i = 0
    while time.monotonic() < end:
        with training_step(i):
            step(i)
        clock.tick()
        i += 1
    sys.exit(0)


if __name__ == "__main__":
    main()
