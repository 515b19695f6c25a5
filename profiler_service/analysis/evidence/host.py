"""The host's evidence (rules/host.py): "All Others" time, the loop between steps, eager
execution, compiles, the steps marked."""

from __future__ import annotations

from pydantic import Field

from profiler_service.analysis.evidence.base import Evidence

__all__ = [
    "BetweenStepsEvidence",
    "CompileTimeEvidence",
    "EagerExecutionEvidence",
    "HostOverheadEvidence",
    "NoStepMarkersEvidence",
    "ShortCaptureEvidence",
]


class HostOverheadEvidence(Evidence):
    """host_overhead: XProf's "All Others" time (Python, I/O between TF ops) in the step."""

    all_others_share: float = Field(description="its share (0-1) of step time")
    all_others_ms_avg: float = Field(description="its mean time a step, in milliseconds")
    step_time_ms_avg: float = Field(description="the mean step time")


class BetweenStepsEvidence(Evidence):
    """between_steps: the training loop's own Python, from one marked step's end to the next
    one's start."""

    between_steps_share: float = Field(description="its share (0-1) of each step")
    between_steps_ms_avg: float = Field(description="its mean time a step, in milliseconds")
    step_time_ms_avg: float = Field(description="the mean step time")
    steps_per_marker: int = Field(description="the training steps each marked step runs")


class EagerExecutionEvidence(Evidence):
    """eager_execution: ops run eagerly, by XProf's figure (the first two fields) or read from
    the capture's own events (the others)."""

    host_eager_pct: float | None = Field(
        None, description="from XProf: the share of host op time run eagerly, in %"
    )
    device_eager_pct: float | None = Field(
        None, description="from XProf: the share of device op time run eagerly, in %"
    )
    eager_ops_per_step: float | None = Field(
        None, description="from the events: the ops a step runs eagerly"
    )
    dispatch_ms_per_step: float | None = Field(
        None,
        description="from the events: a step's time in those ops' Python entries and dispatch, "
        "kernels included",
    )
    kernel_ms_per_step: float | None = Field(
        None, description="from the events: a step's time in their kernels (what a graph keeps)"
    )
    dispatch_share: float | None = Field(
        None, description="from the events: the dispatch's share (0-1) of the step"
    )
    steps_call_tf_functions: bool | None = Field(
        None,
        description="from the events: the steps also call tf.functions (the eager ops are "
        "around them)",
    )


class CompileTimeEvidence(Evidence):
    """compile_time: compilation in the step (XProf's figure)."""

    compile_share: float = Field(description="its share (0-1) of step time")
    compile_ms_avg: float = Field(description="its mean time a step, in milliseconds")


class NoStepMarkersEvidence(Evidence):
    """no_step_markers: the capture marked no training step."""

    steps: int = Field(description="the steps marked: 0")


class ShortCaptureEvidence(Evidence):
    """short_capture: too few steps for steady figures."""

    steps: int = Field(description="the steps the capture marked")
    step_time_ms_avg: float | None = Field(description="their mean time")
