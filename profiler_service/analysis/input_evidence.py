"""input_bound's evidence (findings/input_pipeline.py), below the findings: input_impact.py,
which predicts what its fix saves, reads it too."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from profiler_service.analysis.rule import Evidence

__all__ = ["InputBoundEvidence"]


class InputBoundEvidence(Evidence):
    """input_bound: how much of the step waits on input, by whose reading, and what the
    pipeline lacks."""

    old_percentages: ClassVar[dict[str, str]] = {"input_share_pct": "input_share"}

    input_share: float = Field(
        description="the share of step time (XProf), or of the capture the GPU idled in the "
        "tf.data iterator, spent waiting on input (0-1)"
    )
    source: Literal["xprof", "gpu_idle_in_iterator"] = Field(
        "xprof", description="whose reading the share is"
    )
    xprof_conclusion: str | None = Field(
        None, description="XProf's own sentence, where the GPU's reading replaced it"
    )
    classification: str = Field("", description="HIGHLY or MODERATELY input-bound (XProf's words)")
    step_time_ms_avg: float | None = Field(None, description="the mean step time")
    input_ms_avg: float | None = Field(None, description="the mean input wait a step")
    slowest_stage: str | None = Field(None, description="the tf.data stage that took longest")
    slowest_input_op: str | None = Field(None, description="the input op that took longest")
    python_in_pipeline: bool = Field(
        False, description="tf.py_function / tf.numpy_function among the slowest input ops"
    )
    stage_time_us: dict[str, float] = Field(
        default_factory=dict, description="time in each tf.data stage"
    )
    expensive_stage: str | None = Field(
        None, description="the stage the advice would cache after or parallelise"
    )
    pipeline_lacks: list[str] = Field(
        default_factory=list, description="what the pipeline lacks, the most useful first"
    )
    pipeline_has: list[str] = Field(default_factory=list, description="what it already has")
    generic_advice: bool = Field(
        False, description="no iterator was named: the advice is the usual list"
    )
