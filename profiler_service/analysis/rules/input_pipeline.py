"""Input-bound: the step waits on tf.data."""

from __future__ import annotations

from profiler_service.analysis.models import Finding, InputBound, Severity, Summary
from profiler_service.analysis.pipeline_advice import advise
from profiler_service.analysis.rules.registry import rule

DOCS = "https://www.tensorflow.org/guide/data_performance"
# XProf's own verdict is reused (HIGHLY > 20 %, MODERATELY > 5 % of step time on input).
SEVERITY_OF = {InputBound.HIGHLY: Severity.CRITICAL, InputBound.MODERATELY: Severity.WARNING}


@rule("input_bound")
def input_bound(summary: Summary) -> Finding | None:
    """XProf classifies the job HIGHLY (input > 20 % of step time: critical) or MODERATELY
    (> 5 %: warning) input-bound; names the slowest tf.data stage and whether Python runs in
    the pipeline. The advice reads the pipeline's iterators: what it lacks (parallel calls on a
    sequential slowest map, `prefetch` at the end, `cache` between an expensive stage and a later
    map, Python out of it) and what it already has; the usual list only when XProf named none.
    """
    pipeline = summary.input_pipeline
    severity = SEVERITY_OF.get(pipeline.classification)
    if severity is None:
        return None
    pct = pipeline.input_share_pct or 0.0
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
    return Finding(
        rule="input_bound",
        severity=severity,
        title=f"Your input pipeline is the bottleneck: {pct:g}% of step time waits on input{where}",
        evidence={
            "input_share_pct": pct,
            "classification": pipeline.classification.value,
            "step_time_ms_avg": summary.step_time.avg_ms,
            "input_ms_avg": summary.step_time.breakdown_avg.input_ms,
            "slowest_stage": pipeline.slowest_stage,
            "slowest_input_op": slowest,
            "python_in_pipeline": pipeline.python_in_pipeline,
            "stage_time_us": pipeline.stage_time_us,
            **advice.evidence,
        },
        recommendation=recommendation,
        docs=DOCS,
        impact_share=pct / 100,
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
