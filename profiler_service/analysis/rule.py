"""What names a finding, types its evidence and orders the findings: `Rule`, `Evidence`, `rank`.

They sit below the findings (`findings/`), so that what reads a finding without running the rules
(where.py, input_impact.py, the corpus, the Grafana annotation, the hub) loads no rule and names
a rule by its member, not by a bare string. A member's value is the name `snapshot.json`, the
metrics and the docs carry.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict

from profiler_service.analysis.models import Finding
from profiler_service.analysis.renamed_fields import ReadsOldPercentages

__all__ = ["Evidence", "Rule", "rank"]


class Rule(StrEnum):
    """Every rule's name, each beside the module of `findings/` that defines it, in the order
    the findings catalogue lists them (docs/reference/findings.md)."""

    # findings/device.py
    DEVICE_IDLE = "device_idle"
    OP_DOMINATES = "op_dominates"
    COMMUNICATION_BOUND = "communication_bound"
    HOST_DEVICE_TRANSFER = "host_device_transfer"
    # findings/precision.py
    TENSOR_CORES_UNUSED = "tensor_cores_unused"
    # findings/distributed.py
    STRAGGLER = "straggler"
    # findings/gpu.py
    DEVICE_TRACE_MISSING = "device_trace_missing"
    # findings/precision.py
    MIXED_PRECISION = "mixed_precision"
    # findings/gpu.py
    KERNEL_LAUNCH_BOUND = "kernel_launch_bound"
    GPU_IMBALANCE = "gpu_imbalance"
    # findings/input_pipeline.py
    INPUT_BOUND = "input_bound"
    # findings/host.py
    HOST_OVERHEAD = "host_overhead"
    BETWEEN_STEPS = "between_steps"
    # findings/eager.py
    EAGER_EXECUTION = "eager_execution"
    # findings/host.py
    COMPILE_TIME = "compile_time"
    NO_STEP_MARKERS = "no_step_markers"
    SHORT_CAPTURE = "short_capture"
    # findings/memory.py
    MEMORY_PRESSURE = "memory_pressure"
    MEMORY_FRAGMENTATION = "memory_fragmentation"
    MEMORY_TEMPORARIES = "memory_temporaries"
    MEMORY_GROWTH = "memory_growth"
    # findings/tensorflow.py
    RETRACING = "retracing"
    XLA_RECOMPILATION = "xla_recompilation"
    STEP_TEMPORARIES = "step_temporaries"


class Evidence(ReadsOldPercentages):
    """A finding's evidence, or an item of it. Keys a model does not declare are ignored, not
    refused: a snapshot written by another release of the service still reads; a field renamed
    from a percentage to a share is listed in `old_percentages` and read in both spellings."""

    model_config = ConfigDict(extra="ignore")


def rank(finding: Finding) -> tuple[float, int, str]:
    """Most saved first; then the most severe; a finding that saves nothing measurable last."""
    saving = finding.impact.saving_share if finding.impact is not None else 0.0
    return (-saving, finding.severity.rank, finding.rule)
