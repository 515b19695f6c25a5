"""The rule library: one small pure function per rule, Summary -> Finding | None.

Rules register by name with `@rule` (registry.py); thresholds are named constants beside each
rule. `evaluate()` runs them all and orders the findings by severity, then by share of step time.
Importing this package imports every rule module, which registers its rules.
"""

from profiler_service.analysis.rules import (  # noqa: F401
    device,
    distributed,
    gpu,
    host,
    input_pipeline,
    memory,
    tensorflow,
)
from profiler_service.analysis.rules.registry import RULES, evaluate, rule, share

__all__ = ["RULES", "evaluate", "rule", "share"]
