"""TensorFlow's own pathologies' evidence (rules/tensorflow.py): tf.function retracing, XLA
recompilation, step temporaries."""

from __future__ import annotations

from pydantic import Field

from profiler_service.analysis.evidence.base import Evidence

__all__ = [
    "RetracingEvidence",
    "StepTemporariesEvidence",
    "StepTemporariesOp",
    "XlaRecompilationEvidence",
]


class RetracingEvidence(Evidence):
    """retracing: the tf.function traced most during the capture."""

    function: str = Field(description="the tf.function's name")
    traces: int = Field(description="its calls in the capture that traced it again")
    calls: int = Field(description="its calls in the capture")
    steps: int = Field(description="the steps the capture marked")
    traces_per_step: float | None = Field(description="traces per marked step, where marked")
    tracing_ms: float = Field(
        description="in those calls, the time not spent running it (graph building), in "
        "milliseconds"
    )
    tracing_share: float = Field(description="that time's share (0-1) of the capture")
    traced_in_all: int | None = Field(
        description="TF's own count of its traces, at its last call in the capture"
    )
    jit_compile: bool = Field(description="it is an XLA function (`jit_compile=True`)")


class XlaRecompilationEvidence(Evidence):
    """xla_recompilation: the function XLA compiled most during the capture."""

    function: str = Field(description="the function's name")
    compiles: int = Field(description="XLA compilations during its calls")
    compiles_per_step: float | None = Field(
        description="compilations per marked step, where marked"
    )
    compile_ms: float = Field(description="their time, in milliseconds")
    compile_ms_per_compile: float = Field(description="the mean time of one compilation")
    compile_share: float = Field(description="their share (0-1) of the capture")
    traces: int = Field(description="its calls that traced it again")
    calls: int = Field(description="its calls in the capture")
    xprof_compile_ms_avg: float = Field(
        description="XProf's compile time a step, for comparison (often 0.0 where it misses it)"
    )


class StepTemporariesOp(Evidence):
    """One op's allocations in a step (step_temporaries' `ops`)."""

    op: str = Field(description="the op")
    shapes: list[str] = Field(description="its largest allocations' shapes")
    bytes_per_step: float = Field(description="the bytes it allocates a step")
    count_per_step: float = Field(description="its allocations a step")
    peak_alive_bytes: int = Field(description="the most bytes of its allocations alive at one time")


class StepTemporariesEvidence(Evidence):
    """step_temporaries: memory allocated and freed inside every step, and by which ops."""

    allocator: str = Field(description="the allocator with the largest swing")
    swing_bytes: int = Field(
        description="how far its peak stands above the steps' median low point, in bytes"
    )
    peak_bytes_in_use: int = Field(description="its peak memory in use, in bytes")
    swing_share_of_peak: float = Field(description="the swing's share (0-1) of the peak")
    ops: list[StepTemporariesOp] = Field(description="the ops allocating the most per step")
