"""Input-bound: the step waits on tf.data."""

from __future__ import annotations

from profiler_service.analysis.models import (
    Finding,
    HostActivity,
    InputBound,
    InputPipeline,
    Severity,
    Summary,
)
from profiler_service.analysis.rules.registry import rule

DOCS = "https://www.tensorflow.org/guide/data_performance"
# XProf's own verdict is reused (HIGHLY > 20 %, MODERATELY > 5 % of step time on input).
SEVERITY_OF = {InputBound.HIGHLY: Severity.CRITICAL, InputBound.MODERATELY: Severity.WARNING}
# XProf's thresholds (op_stats_to_input_pipeline_analysis.cc), applied to the share of the
# capture a GPU idled while the host waited in the tf.data iterator.
HIGHLY_INPUT_PCT = 20.0
MODERATELY_INPUT_PCT = 5.0


def gpu_input_verdict(summary: Summary) -> tuple[InputBound, float] | None:
    """The input-bound class read from the GPU's plane, where XProf's is weaker: XProf 2.24
    files a GPU's wait for input under "All Others" on captures that TensorFlow's profiler
    then called HIGHLY input-bound."""
    if summary.gpu is None or not summary.gpu.active:
        return None
    waited = summary.gpu.idle_while(HostActivity.INPUT)
    if waited > HIGHLY_INPUT_PCT:
        level = InputBound.HIGHLY
    elif waited > MODERATELY_INPUT_PCT:
        level = InputBound.MODERATELY
    else:
        return None
    xprof = summary.input_pipeline.classification
    if xprof is InputBound.HIGHLY or (xprof is level is InputBound.MODERATELY):
        return None
    return level, waited


@rule("input_bound")
def input_bound(summary: Summary) -> Finding | None:
    """XProf classifies the job HIGHLY (input > 20 % of step time: critical) or MODERATELY
    (> 5 %: warning) input-bound; names the slowest tf.data stage and whether Python runs in
    the pipeline. On a GPU, the same thresholds apply to the share of the capture the GPU
    idled while the host waited in the tf.data iterator, where that says more than XProf.
    """
    pipeline = summary.input_pipeline
    from_gpu = gpu_input_verdict(summary)
    if from_gpu is not None:
        pipeline = InputPipeline(
            **{
                **pipeline.model_dump(),
                "classification": from_gpu[0],
                "input_share_pct": from_gpu[1],
            }
        )
    severity = SEVERITY_OF.get(pipeline.classification)
    if severity is None:
        return None
    pct = pipeline.input_share_pct or 0.0
    slowest = pipeline.slowest_ops[0].name if pipeline.slowest_ops else None
    advice = [
        "parallelise the map: `.map(fn, num_parallel_calls=tf.data.AUTOTUNE)`",
        "overlap input with training: end the pipeline with `.prefetch(tf.data.AUTOTUNE)`",
        "`.cache()` what does not change between epochs (after decoding, before augmentation)",
        "store records as TFRecord and read them with `interleave(..., num_parallel_calls=...)`",
    ]
    if pipeline.python_in_pipeline:
        advice.insert(
            0,
            "move the Python decoding (tf.py_function / tf.numpy_function) into "
            "TensorFlow ops: Python runs one element at a time under the GIL",
        )
    where = f"; the slowest stage is {pipeline.slowest_stage}" if pipeline.slowest_stage else ""
    waits = "of the capture the GPU waits on input" if from_gpu else "of step time waits on input"
    return Finding(
        rule="input_bound",
        severity=severity,
        title=f"Your input pipeline is the bottleneck: {pct:g}% {waits}{where}",
        evidence={
            "input_share_pct": pct,
            "source": "gpu_idle_in_iterator" if from_gpu else "xprof",
            "xprof_conclusion": summary.input_pipeline.conclusion if from_gpu else None,
            "classification": pipeline.classification.value,
            "step_time_ms_avg": summary.step_time.avg_ms,
            "input_ms_avg": summary.step_time.breakdown_avg.input_ms,
            "slowest_stage": pipeline.slowest_stage,
            "slowest_input_op": slowest,
            "python_in_pipeline": pipeline.python_in_pipeline,
            "stage_time_us": pipeline.stage_time_us,
        },
        recommendation=_sentence("; ".join(advice)),
        docs=DOCS,
        impact_share=pct / 100,
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
