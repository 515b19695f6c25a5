"""The rule library: one small pure function per rule, Summary -> Finding | None.

Rules register by name with `@rule` (registry.py); thresholds are named constants beside each
rule; a rule that another's finding makes moot declares it (`silenced_by`), and the registry
applies it: rules never call each other. `evaluate()` runs each once, silencers first, and orders
the findings by what their fixes save, then by severity.
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
