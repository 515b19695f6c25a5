"""Step metrics: the recorder, its exposition, and the real step markers feeding it."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from profiler_service.exporters.step_collector import StepCollector
from profiler_service.probes.steps import STEP_STATS, StepStats


def families(registry: CollectorRegistry) -> dict:
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def bucket_samples(family, name: str = "train") -> list[tuple[float, float]]:
    out = [
        (float(s.labels["le"]), s.value)
        for s in family.samples
        if s.name.endswith("_bucket") and s.labels["name"] == name
    ]
    return sorted(out)


def test_histogram_buckets_are_cumulative_and_inf_equals_count():
    stats = StepStats(buckets_s=(0.01, 0.1, 1.0))
    for d in (0.005, 0.01, 0.05, 0.5, 3.0, 3.0):
        stats.observe(d)
    registry = CollectorRegistry()
    registry.register(StepCollector(stats))
    fams = families(registry)
    buckets = bucket_samples(fams["profiler_training_step_duration_seconds"])
    # le is inclusive: 0.01 falls in the 0.01 bucket.
    assert buckets == [(0.01, 2), (0.1, 3), (1.0, 4), (float("inf"), 6)]
    samples = {s.name: s.value for s in fams["profiler_training_step_duration_seconds"].samples}
    assert samples["profiler_training_step_duration_seconds_count"] == 6
    assert abs(samples["profiler_training_step_duration_seconds_sum"] - 6.565) < 1e-9
    steps = fams["profiler_training_steps"].samples[0]
    assert steps.name == "profiler_training_steps_total" and steps.value == 6


def test_no_steps_yet_exports_empty_families():
    registry = CollectorRegistry()
    registry.register(StepCollector(StepStats()))
    fams = families(registry)
    assert fams["profiler_training_steps"].samples == []


def test_keras_callback_and_training_step_feed_the_process_wide_recorder():
    import tensorflow as tf
    from tensorflow import keras

    from profiler_service.steps import ProfilerStepCallback, training_step

    STEP_STATS.reset()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((40, 4), np.float32)
    model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0, callbacks=[ProfilerStepCallback()])
    for i in range(3):
        with training_step(i, name="custom"):
            tf.reduce_sum(tf.ones((8, 8)))
    stats = STEP_STATS.snapshot()
    assert stats["train"][1] == 5  # 40 samples / batch 8
    assert stats["custom"][1] == 3
    assert all(sum_s > 0 for _, _, sum_s in stats.values())


def test_a_call_of_n_steps_counts_n_steps_of_a_share_each():
    stats = StepStats(buckets_s=(0.01, 0.1))
    stats.observe(0.2, steps=4)  # 50 ms a step
    stats.observe(0.005)
    counts, count, sum_s = stats.snapshot()["train"]
    assert counts == [1, 4, 0] and count == 5
    assert abs(sum_s - 0.205) < 1e-9
    stats.observe(0.3, steps=0)  # nothing ran: nothing counted
    assert stats.snapshot()["train"][1] == 5


def test_keras_callback_counts_training_steps_under_steps_per_execution():
    from tensorflow import keras

    from profiler_service.steps import ProfilerStepCallback, training_step

    STEP_STATS.reset()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    x = np.zeros((40, 4), np.float32)
    callback = ProfilerStepCallback()
    # 5 batches in calls of 2, 2 and 1: Keras names the last call's end batch 5, past the epoch.
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[callback])
    with training_step(0, name="custom", steps=3):
        pass
    stats = STEP_STATS.snapshot()
    assert stats["train"][1] == 10 and callback.step == 10
    assert stats["custom"][1] == 3
