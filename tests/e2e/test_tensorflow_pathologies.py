"""TensorFlow's own pathologies on real jobs, each beside a twin without the fault: retracing,
XLA recompilation, input pipelines read for what they lack and have, step temporaries by op.

The jobs are the demo's (`profiler_service.demo.tf_pathologies`); each trains a few seconds.
"""

from __future__ import annotations

import pytest
from helpers import RECORDS_MEMORY, free_port, start_job


def capture(
    job_args: tuple[str, ...],
    service_factory,
    duration: str = "2s",
    env: dict[str, str] | None = None,
) -> dict:
    """Start a demo job, capture it through the sidecar, stop it; the snapshot's JSON."""
    job = start_job(*job_args, "--profiler-port", str(free_port()), "--seconds", "120", env=env)
    try:
        service = service_factory([job.address])
        with service.client() as client:
            body = client.post("/profile", params={"duration": duration, "wait": "true"}).json()
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    return body


def findings(body: dict) -> dict[str, dict]:
    return {f["rule"]: f for f in body["findings"]}


# --- retracing ------------------------------------------------------------------------------


def test_a_python_number_argument_retraces_every_step(service_factory):
    body = capture(("--workload", "function", "--arg", "python-number"), service_factory)
    found = findings(body)
    assert "retracing" in found, body["findings"]
    retracing = found["retracing"]
    evidence = retracing["evidence"]
    assert evidence["function"] == "step_fn"
    # One new trace per call, one call per step (the steps at the capture's edges aside).
    assert evidence["traces"] == evidence["calls"]
    assert evidence["traces_per_step"] == pytest.approx(1.0, abs=0.1)
    assert evidence["traced_in_all"] > evidence["traces"]  # it traced before the capture too
    # Tracing is nearly all of this small step: measured 89-98 %.
    assert evidence["tracing_share"] > 0.5
    assert retracing["severity"] == "warning"
    assert "pass it as a tensor" in retracing["recommendation"]
    assert "input_signature" in retracing["recommendation"]
    assert "xla_recompilation" not in found


def test_a_tensor_argument_traces_once_before_the_capture(service_factory):
    body = capture(("--workload", "function", "--arg", "tensor"), service_factory)
    assert "retracing" not in findings(body), body["findings"]
    [function] = body["summary"]["tf_functions"]["functions"]
    # Silent by decision, not for want of data: every call was read, none traced.
    assert function["name"] == "step_fn"
    assert function["calls"] > 100 and function["traces"] == 0
    assert function["traced_in_all"] == 1


# --- XLA ------------------------------------------------------------------------------------


def test_xla_recompiles_for_every_new_batch_size(service_factory):
    """With `reduce_retracing=True` the function keeps one trace, but XLA compiles each new
    shape: only the compiler's events show it (XProf's compile time stays 0 on CPU)."""
    args = ("--workload", "function", "--arg", "new-shapes", "--jit-compile")
    body = capture((*args, "--reduce-retracing"), service_factory)
    found = findings(body)
    assert "xla_recompilation" in found, body["findings"]
    evidence = found["xla_recompilation"]["evidence"]
    assert evidence["function"] == "step_fn"
    assert evidence["compiles_per_step"] == pytest.approx(1.0, abs=0.2)
    assert evidence["traces"] == 0 and "retracing" not in found
    assert evidence["compile_share"] > 0.5  # measured 87-100 %: compiling is the step
    assert evidence["compile_ms_per_compile"] > 1
    assert evidence["xprof_compile_ms_avg"] == 0.0
    assert "drop_remainder=True" in found["xla_recompilation"]["recommendation"]


def test_xla_with_one_shape_compiles_once_before_the_capture(service_factory):
    body = capture(("--workload", "function", "--arg", "tensor", "--jit-compile"), service_factory)
    found = findings(body)
    assert "xla_recompilation" not in found and "retracing" not in found, body["findings"]
    [function] = body["summary"]["tf_functions"]["functions"]
    assert function["jit_compile"] is True
    assert function["calls"] > 100 and function["compiles"] == 0


def test_keras_fit_with_jit_compile_recompiles_for_new_batch_sizes(service_factory):
    """Keras compiles its train step on an executor thread, inside no call of ours: the
    compiler's event names the XLA module (`a_inference_one_step_on_data_...`)."""
    args = ("--workload", "xla-fit", "--batches", "varying")
    found = findings(capture(args, service_factory, duration="3s"))
    assert "xla_recompilation" in found, found
    evidence = found["xla_recompilation"]["evidence"]
    assert evidence["function"] == "one_step_on_data"
    assert evidence["compiles"] >= 1 and evidence["compiles_per_step"] >= 0.5
    assert evidence["traces"] == 0  # Keras traces with reduce_retracing=True


def test_keras_fit_with_jit_compile_and_fixed_batches_compiles_before_the_capture(
    service_factory,
):
    body = capture(("--workload", "xla-fit", "--batches", "fixed"), service_factory)
    assert "xla_recompilation" not in findings(body), body["findings"]
    functions = body["summary"]["tf_functions"]["functions"]
    assert functions and sum(f["compiles"] for f in functions) == 0
    assert any(f["calls"] > 20 for f in functions), "Keras's steps were read"


# --- input pipelines ------------------------------------------------------------------------


def test_a_sequential_map_without_prefetch_is_told_both(service_factory):
    body = capture(("--workload", "pipeline", "--pipeline", "sequential"), service_factory)
    found = findings(body)
    assert "input_bound" in found, body["findings"]
    finding = found["input_bound"]
    evidence, advice = finding["evidence"], finding["recommendation"]
    assert evidence["generic_advice"] is False
    # tf.data fused `map(...).batch(...)` into one MapAndBatch iterator; its events say it runs
    # one element at a time (the map's random augmentation kept tf.data from parallelising it).
    assert evidence["expensive_stage"].endswith("MapAndBatch")
    assert "one element at a time" in advice and "num_parallel_calls" in advice
    assert "end the pipeline with `.prefetch" in advice
    assert "Python" not in advice  # no py_function in this pipeline
    assert ".cache()" not in advice  # nothing after the augmenting map to cache before
    assert (evidence["pipeline_lacks"], evidence["pipeline_has"]) == (
        ["parallel_calls", "prefetch"],
        [],
    )


def test_a_deterministic_map_tf_data_parallelised_is_not_told_to_parallelise(service_factory):
    """`.map(decode)` without `num_parallel_calls`: tf.data made it parallel by itself."""
    body = capture(("--workload", "pipeline", "--pipeline", "deterministic"), service_factory)
    finding = findings(body)["input_bound"]
    evidence, advice = finding["evidence"], finding["recommendation"]
    assert evidence["pipeline_lacks"] == ["prefetch", "cheaper_stage"]
    assert evidence["pipeline_has"] == ["parallel_calls"]
    assert "written without `num_parallel_calls`, but tf.data already runs it in parallel" in (
        advice
    )
    assert "one element at a time" not in advice


def test_a_tuned_pipeline_is_not_told_what_it_already_does(service_factory):
    body = capture(("--workload", "pipeline", "--pipeline", "tuned"), service_factory)
    finding = findings(body)["input_bound"]  # still input-bound: 2 cores cannot decode faster
    advice = finding["recommendation"]
    assert finding["evidence"]["generic_advice"] is False
    assert finding["evidence"]["pipeline_lacks"] == ["cheaper_stage"]
    assert finding["evidence"]["pipeline_has"] == ["parallel_calls", "prefetch"]
    assert "one element at a time" not in advice and "end the pipeline with" not in advice
    assert "Already there:" in advice and "ends with `prefetch`" in advice
    assert "runs in parallel (autotuned" in advice


def test_cache_is_advised_between_the_expensive_decode_and_the_later_augmentation(
    service_factory,
):
    body = capture(
        ("--workload", "pipeline", "--pipeline", "augment-after-decode"), service_factory
    )
    finding = findings(body)["input_bound"]
    assert finding["evidence"]["expensive_stage"].endswith("ParallelMapV2")
    advice = finding["recommendation"]
    assert "`.cache()` it: right after it, before the later `.map()` + `.batch()` (" in advice
    assert "XProf: `MapAndBatch`)" in advice


# --- step temporaries -----------------------------------------------------------------------


def memory_read(body: dict) -> list[dict]:
    """What the rule reads of each allocator, for a failure's message."""
    return [
        {
            "allocator": m["allocator"],
            "steps": body["summary"]["step_time"]["count"],
            "peak": m["peak_bytes_in_use"],
            "floors": [p["bytes_in_use"] for p in m["step_floors"]],
            "growth": m["growth"],
            "ops": [(a["op_name"], a["bytes_per_step"]) for a in m["allocations_by_op"]],
        }
        for m in body["summary"]["memory"]
    ]


def test_step_temporaries_are_named_by_op(service_factory):
    body = capture(
        ("--workload", "temporaries", "--temporaries-mb", "64"),
        service_factory,
        duration="3s",
        env=RECORDS_MEMORY,
    )
    found = findings(body)
    assert "step_temporaries" in found, (body["findings"], memory_read(body))
    assert "memory_growth" not in found
    finding = found["step_temporaries"]
    assert finding["severity"] == "info"
    ops = {op["op"]: op for op in finding["evidence"]["ops"]}
    # The job's own sizes: 16 slices stacked (the stack), the stack concatenated with its
    # double (the concat): one of each per step. The allocator rounds sizes up (mklcpu gave
    # 32 MiB for the 21.3 MiB stack), so bytes are at least the tensor's, within 1.6 times.
    slices = 16
    rows = (64 * 2**20) // (4 * 256 * slices * 3)
    stack_bytes = slices * rows * 256 * 4
    assert ops["stack"]["shapes"] == [f"[{slices},{rows},256]"]
    assert ops["concat"]["shapes"] == [f"[{2 * slices},{rows},256]"]
    assert stack_bytes <= ops["stack"]["bytes_per_step"] <= 1.6 * stack_bytes
    assert 2 * stack_bytes <= ops["concat"]["bytes_per_step"] <= 1.6 * 2 * stack_bytes
    assert ops["stack"]["count_per_step"] == pytest.approx(1.0, abs=0.1)
    assert ops["concat"]["peak_alive_bytes"] == pytest.approx(ops["concat"]["bytes_per_step"])
    assert finding["evidence"]["ops"][0]["op"] == "concat"
    assert "Not a leak" in finding["recommendation"] and "`del`" in finding["recommendation"]


def test_a_job_without_large_temporaries_has_no_step_temporaries(service_factory):
    body = capture(("--workload", "compute-bound"), service_factory, env=RECORDS_MEMORY)
    assert "step_temporaries" not in findings(body), body["findings"]
    # Silent by decision: its memory was read, its steps swing less than the threshold.
    assert body["summary"]["memory"], "the compute-bound job records memory events"
