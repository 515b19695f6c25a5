"""What a finding read, typed: the model of a rule's `evidence` (declared with
`@rule(name, evidence=...)`), which the rule fills and its readers (impact.py's models, the
advice, the corpus) read by attribute, not by key. The findings catalogue lists each model's
fields. In `snapshot.json` the evidence stays a plain object: its keys are these fields.

One module per area, as the rules are (`rules/device.py` fills `evidence/device.py`'s models). A
rule whose finding has two readings (XProf's figure, or the GPU's own plane) has one model whose
fields of the other reading are absent (None); it dumps the fields it set
(`model_dump(exclude_unset=True)`), so a finding holds the keys of its reading only.
"""

import re

from profiler_service.analysis.evidence.base import Evidence
from profiler_service.analysis.evidence.device import (
    CommunicationBoundEvidence,
    DeviceIdleEvidence,
    HostDeviceTransferEvidence,
    OpDominatesEvidence,
    TensorCoresUnusedEvidence,
)
from profiler_service.analysis.evidence.distributed import StragglerEvidence
from profiler_service.analysis.evidence.gpu import (
    DeviceTraceMissingEvidence,
    GpuImbalanceEvidence,
    KernelLaunchBoundEvidence,
    MixedPrecisionEvidence,
)
from profiler_service.analysis.evidence.host import (
    BetweenStepsEvidence,
    CompileTimeEvidence,
    EagerExecutionEvidence,
    HostOverheadEvidence,
    NoStepMarkersEvidence,
    ShortCaptureEvidence,
)
from profiler_service.analysis.evidence.input import InputBoundEvidence
from profiler_service.analysis.evidence.memory import (
    AliveAtPeak,
    KeptAcrossSteps,
    MemoryFragmentationEvidence,
    MemoryGrowthEvidence,
    MemoryPressureEvidence,
    MemoryTemporariesEvidence,
)
from profiler_service.analysis.evidence.tensorflow import (
    RetracingEvidence,
    StepTemporariesEvidence,
    StepTemporariesOp,
    XlaRecompilationEvidence,
)

__all__ = [
    "AliveAtPeak",
    "BetweenStepsEvidence",
    "CommunicationBoundEvidence",
    "CompileTimeEvidence",
    "DeviceIdleEvidence",
    "DeviceTraceMissingEvidence",
    "EagerExecutionEvidence",
    "GpuImbalanceEvidence",
    "HostDeviceTransferEvidence",
    "HostOverheadEvidence",
    "InputBoundEvidence",
    "KeptAcrossSteps",
    "KernelLaunchBoundEvidence",
    "MemoryFragmentationEvidence",
    "MemoryGrowthEvidence",
    "MemoryPressureEvidence",
    "MemoryTemporariesEvidence",
    "MixedPrecisionEvidence",
    "NoStepMarkersEvidence",
    "OpDominatesEvidence",
    "RetracingEvidence",
    "ShortCaptureEvidence",
    "StepTemporariesEvidence",
    "StepTemporariesOp",
    "StragglerEvidence",
    "TensorCoresUnusedEvidence",
    "XlaRecompilationEvidence",
    "evidence_model",
]


def evidence_model(rule: str) -> type[Evidence] | None:
    """The evidence model of `rule`, by the name its class carries (`retracing`:
    `RetracingEvidence`), for readers that load no rule (the hub's report page); the registry's
    own mapping agrees (tests/analysis/test_rules.py)."""
    return _BY_RULE.get(rule)


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


_BY_RULE = {
    re.sub(r"(?<!^)(?=[A-Z])", "_", c.__name__.removesuffix("Evidence")).lower(): c
    for c in _subclasses(Evidence)
    if c.__name__.endswith("Evidence")
}
