"""Input-bound: the step waits on tf.data. Its evidence's model is in input_evidence.py, below
the findings, and what its fix saves in input_impact.py (`input_wait`): both read it."""

from __future__ import annotations

from profiler_service.analysis.findings.advice import JAX_INPUT, Advice
from profiler_service.analysis.findings.registry import rule
from profiler_service.analysis.input_evidence import InputBoundEvidence
from profiler_service.analysis.input_impact import input_wait
from profiler_service.analysis.models import (
    Finding,
    HostActivity,
    InputBound,
    InputPipeline,
    Severity,
    Summary,
)
from profiler_service.analysis.pipeline_advice import advise
from profiler_service.analysis.renamed_fields import percent
from profiler_service.analysis.rule import Rule

DOCS = "https://www.tensorflow.org/guide/data_performance"
# XProf's own verdict is reused (HIGHLY > 20 %, MODERATELY > 5 % of step time on input).
SEVERITY_OF = {InputBound.HIGHLY: Severity.CRITICAL, InputBound.MODERATELY: Severity.WARNING}
# XProf's thresholds (op_stats_to_input_pipeline_analysis.cc: 20 % and 5 %), as shares, applied
# to the share of the capture a GPU idled while the host waited in the tf.data iterator.
HIGHLY_INPUT_SHARE = 0.20
MODERATELY_INPUT_SHARE = 0.05


def gpu_input_verdict(summary: Summary) -> tuple[InputBound, float] | None:
    """The input-bound class read from the GPU's plane, where XProf's is weaker: XProf 2.24
    files a GPU's wait for input under "All Others" on captures that TensorFlow's profiler
    then called HIGHLY input-bound."""
    if summary.gpu is None or not summary.gpu.active:
        return None
    waited = summary.gpu.idle_while(HostActivity.INPUT)
    if waited > HIGHLY_INPUT_SHARE:
        level = InputBound.HIGHLY
    elif waited > MODERATELY_INPUT_SHARE:
        level = InputBound.MODERATELY
    else:
        return None
    xprof = summary.input_pipeline.classification
    if xprof is InputBound.HIGHLY or (xprof is level is InputBound.MODERATELY):
        return None
    return level, waited


# Where the capture shows no tf.data pipeline to advise on, a JAX job's input advice.
JAX_GENERIC_INPUT = (
    f"The device waits for input: {JAX_INPUT}; decode and augment in parallel workers, not in "
    "the training loop's Python."
)


def _jax_input_advice(finding: Finding) -> str | None:
    """The generic advice only: a tf.data pipeline's own advice holds in a JAX job too."""
    generic = InputBoundEvidence.model_validate(finding.evidence).generic_advice
    return JAX_GENERIC_INPUT if generic else None


INPUT_BOUND_ADVICE = Advice(jax=_jax_input_advice)


@rule(
    Rule.INPUT_BOUND,
    evidence=InputBoundEvidence,
    impact=input_wait,
    advice=INPUT_BOUND_ADVICE,
)
def input_bound(summary: Summary) -> Finding | None:
    """XProf classifies the job HIGHLY (input > 20 % of step time: critical) or MODERATELY
    (> 5 %: warning) input-bound; names the slowest tf.data stage and whether Python runs in
    the pipeline. The advice reads the pipeline's iterators: what it lacks (parallel calls on a
    sequential slowest map, `prefetch` at the end, `cache` between an expensive stage and a later
    map, Python out of it) and what it already has; the usual list only when XProf named none.
    On a GPU, the same thresholds apply to the share of the capture the GPU idled while the host
    waited in the tf.data iterator, where that says more than XProf.
    """
    pipeline = summary.input_pipeline
    from_gpu = gpu_input_verdict(summary)
    if from_gpu is not None:
        pipeline = InputPipeline(
            **{
                **pipeline.model_dump(),
                "classification": from_gpu[0],
                "input_share": from_gpu[1],
            }
        )
    severity = SEVERITY_OF.get(pipeline.classification)
    if severity is None:
        return None
    pct = percent(pipeline.input_share or 0.0)
    slowest = pipeline.slowest_ops[0].name if pipeline.slowest_ops else None
    advice = advise(pipeline)
    recommendation = _sentence("; ".join(advice.lacks))
    if advice.has:
        recommendation += " Already there: " + "; ".join(advice.has) + "."
    if advice.generic:
        recommendation = (
            "XProf named no tf.data iterators, so this is the usual list, not a reading of this "
            "pipeline. " + recommendation
        )
    where = f"; the slowest stage is {pipeline.slowest_stage}" if pipeline.slowest_stage else ""
    waits = "of the capture the GPU waits on input" if from_gpu else "of step time waits on input"
    return Finding(
        severity=severity,
        title=f"Your input pipeline is the bottleneck: {pct:g}% {waits}{where}",
        evidence=InputBoundEvidence(
            input_share=round(pipeline.input_share or 0.0, 6),
            source="gpu_idle_in_iterator" if from_gpu else "xprof",
            xprof_conclusion=summary.input_pipeline.conclusion if from_gpu else None,
            classification=pipeline.classification.value,
            step_time_ms_avg=summary.step_time.avg_ms,
            input_ms_avg=summary.step_time.breakdown_avg.input_ms,
            slowest_stage=pipeline.slowest_stage,
            slowest_input_op=slowest,
            python_in_pipeline=pipeline.python_in_pipeline,
            stage_time_us=pipeline.stage_time_us,
            **advice.evidence,
        ).model_dump(),
        recommendation=recommendation,
        docs=DOCS,
        impact_share=pct / 100,
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
