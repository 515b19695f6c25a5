"""What GET /metrics and the step markers cost.

    .venv/bin/python bench/bench_metrics.py [--snapshots 1000] [--scrapes 500] [--rounds 8]

1. One scrape (the whole exposition the service renders) with N snapshots in the store: median
   and p99 over many scrapes. The aim is p99 under 10 ms; the collectors read the SQLite index
   (two aggregate queries), never the snapshot.json files.
2. The step callback's overhead on a real Keras job: the same model and data trained with and
   without `ProfilerStepCallback` (and with an empty batch-level callback, to separate Keras' own
   cost of any per-batch callback), rotating the arms round by round in this one process; the
   ratio of medians and of minima (noise from other load only adds time). The aim is under 1 %.
   The callback's own cost per step (begin + end, no training) is timed too: on a busy machine
   the side-by-side ratio's noise is far larger than that cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench_common import record

from profiler_service.config import Settings
from profiler_service.models import (
    CaptureOptions,
    Snapshot,
    SnapshotStatus,
)
from profiler_service.service import build_service

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
T0 = datetime(2026, 1, 5, tzinfo=UTC)
SUMMARY = {
    "bottleneck": "input",
    "step_time": {"count": 36, "avg_ms": 77.0},
    "input_pipeline": {"input_share_pct": 97.4},
    "utilisation": {"device_idle_pct": 12.5},
}
FINDINGS = [{"rule": "input_bound", "severity": "critical", "title": "input-bound"}]


def fill_store(service, n: int) -> None:
    """N snapshots through the store's real path (begin, adopt, publish/fail), 4 targets."""
    store = service.store
    for i in range(n):
        snapshot = Snapshot.model_validate(
            {
                "id": f"{i:06d}-t{i % 4}",
                "target": f"t{i % 4}",
                "capture": CaptureOptions(
                    duration_ms=1000,
                    host_tracer_level=2,
                    python_tracer_level=0,
                    device_tracer_level=1,
                ).model_dump(),
                "created_at": T0 + timedelta(seconds=i),
                "summary": SUMMARY,
                "findings": FINDINGS,
            }
        )
        logdir = store.begin(snapshot)
        xplane = logdir / "host.xplane.pb"
        xplane.write_bytes(b"x" * 4096)
        store.adopt_capture(snapshot, [xplane])
        if i % 10 == 9:
            snapshot.status = SnapshotStatus.FAILED
            store.fail(snapshot, keep_files=False)
        else:
            store.publish(snapshot)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def bench_scrape(n_snapshots: int, n_scrapes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            store=Path(tmp) / "store",
            targets=" ".join(f"t{i}=grpc://127.0.0.1:9" for i in range(4)),
            retention_max_count=n_snapshots + 10,
        )
        service = build_service(settings)
        started = time.perf_counter()
        fill_store(service, n_snapshots)
        print(f"store: {n_snapshots} snapshots written in {time.perf_counter() - started:.1f} s")
        docs = list(service.store.root.rglob("snapshot.json"))
        assert len(docs) == n_snapshots, len(docs)
        metrics = service.metrics
        for accept, label in ((None, "text 0.0.4"), (OPENMETRICS, "OpenMetrics")):
            metrics.render(accept)  # first scrape: NVML probe, latest-summary cache
            times_ms = []
            for _ in range(n_scrapes):
                t = time.perf_counter()
                body, _ = metrics.render(accept)
                times_ms.append((time.perf_counter() - t) * 1000)
            p99 = percentile(times_ms, 99)
            record(
                f"GET /metrics p99, {n_snapshots} snapshots ({label})", p99, "< 10", p99 < 10, "ms"
            )
            print(
                f"scrape ({label}, {len(body)} bytes): median {statistics.median(times_ms):.2f} ms,"
                f" p99 {percentile(times_ms, 99):.2f} ms over {n_scrapes} scrapes"
            )
        service.stop()


def bench_step_callback(rounds: int, steps: int) -> None:
    import tensorflow as tf
    from tensorflow import keras

    from profiler_service.demo.workloads import FEATURES, build_model
    from profiler_service.steps import ProfilerStepCallback

    x = tf.random.normal((256, FEATURES))
    dataset = tf.data.Dataset.from_tensors((x, tf.reduce_sum(x, 1, keepdims=True))).repeat()
    model = build_model(width=512)
    model.fit(dataset, epochs=1, steps_per_epoch=50, verbose=0)  # trace and warm up

    def run(callbacks) -> float:
        t = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=callbacks)
        return (time.perf_counter() - t) / steps

    class EmptyBatchHooks(keras.callbacks.Callback):
        """Overrides the batch hooks and does nothing: what any per-batch callback costs."""

        def on_train_batch_begin(self, batch, logs=None):
            pass

        def on_train_batch_end(self, batch, logs=None):
            pass

    arms: dict[str, list[float]] = {"none": [], "empty": [], "step": []}
    for r in range(rounds):
        # Rotate the order so drift (thermal, other load) hits every arm alike.
        order = [
            ("none", lambda: []),
            ("empty", lambda: [EmptyBatchHooks()]),
            ("step", lambda: [ProfilerStepCallback()]),
        ]
        order = order[r % 3 :] + order[: r % 3]
        for name, callbacks in order:
            arms[name].append(run(callbacks()))
    for stat in (statistics.median, min):
        base, empty, marked = (stat(arms[k]) for k in ("none", "empty", "step"))
        print(
            f"step time, real Keras job, {stat.__name__} of {rounds} rounds x {steps} steps per "
            f"arm: no callback {base * 1000:.3f} ms, ProfilerStepCallback {marked * 1000:.3f} ms"
            f" -> ratio {marked / base:.4f}; an empty batch-level callback {empty * 1000:.3f} ms"
            f" -> ratio {empty / base:.4f} (Keras runs batch hooks synchronously once any "
            f"callback has them); ProfilerStepCallback / empty {marked / empty:.4f}"
        )
    base = min(arms["none"])

    ratio = statistics.median(arms["step"]) / statistics.median(arms["none"])
    record("step time, ProfilerStepCallback / none (medians)", ratio, "< 1.01", ratio < 1.01, "x")

    callback = ProfilerStepCallback()
    n = 20_000
    t = time.perf_counter()
    for i in range(n):
        callback.on_train_batch_begin(i)
        callback.on_train_batch_end(i)
    per_step_us = (time.perf_counter() - t) / n * 1e6
    print(
        f"callback alone: {per_step_us:.2f} us per step "
        f"= {per_step_us / (base * 1e6) * 100:.3f} % of this job's step time"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    bench_scrape(args.snapshots, args.scrapes)
    bench_step_callback(args.rounds, args.steps)


if __name__ == "__main__":
    main()
