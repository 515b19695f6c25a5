"""What a finding read, typed: the model of a rule's `evidence` (declared with
`@rule(name, evidence=...)`), which the rule fills and its readers (impact.py's models, the
advice, the corpus) read by attribute, not by key. The findings catalogue lists each model's
fields. In `snapshot.json` the evidence stays a plain object: its keys are these fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DeviceIdleEvidence", "InputBoundEvidence"]


class InputBoundEvidence(BaseModel):
    """input_bound: how much of the step waits on input, by whose reading, and what the
    pipeline lacks."""

    model_config = ConfigDict(extra="ignore")

    input_share_pct: float = Field(
        description="the share of step time (XProf), or of the capture the GPU idled in the "
        "tf.data iterator, spent waiting on input"
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


class DeviceIdleEvidence(BaseModel):
    """device_idle: how idle the accelerator was and, on a GPU, what the host did meanwhile."""

    model_config = ConfigDict(extra="ignore")

    device_idle_pct: float = Field(description="the share of the time the device idled")
    device_duty_cycle_pct: float | None = Field(None, description="XProf's device duty cycle")
    bottleneck: str | None = Field(None, description="the summary's bottleneck")
    idle_while_host_pct: dict[str, float] | None = Field(
        None,
        description="on a GPU: the share of the capture it idled while the host did each "
        "activity (input, transfer, tf_ops, python, tf_data, nothing)",
    )
    gpus: dict[str, float] | None = Field(
        None, description="on a GPU: each active GPU's idle share"
    )
