"""The findings: one module per area, each holding its rules (one pure function per rule,
Summary -> Finding | None), their evidence's models, the models of what their fixes save and
their advice in JAX's and ROCm's words, all declared on the rule (`@rule(Rule.X, evidence=...,
impact=..., advice=..., silenced_by=...)`, registry.py). Thresholds are named constants beside
each rule; a rule that another's finding makes moot declares it (`silenced_by`), and the registry
applies it: rules never call each other. `evaluate()` runs each once, silencers first, and orders
the findings by what their fixes save, then by severity.

Importing this package imports every area module, which registers its rules; the registry then
lists them in `Rule`'s order, the catalogue's.
"""

from profiler_service.analysis.findings import (  # noqa: F401
    device,
    distributed,
    eager,
    gpu,
    host,
    input_pipeline,
    memory,
    precision,
    tensorflow,
)
from profiler_service.analysis.findings.registry import (
    ADVICE,
    EVIDENCE,
    IMPACT,
    RULES,
    SILENCED_BY,
    estimate,
    evaluate,
    in_rule_order,
    rank,
    rule,
    share,
)
from profiler_service.analysis.rule import Evidence, Rule

in_rule_order()

__all__ = [
    "ADVICE",
    "EVIDENCE",
    "IMPACT",
    "RULES",
    "SILENCED_BY",
    "Evidence",
    "Rule",
    "estimate",
    "evaluate",
    "evidence_model",
    "rank",
    "rule",
    "share",
]


def evidence_model(rule: str) -> type[Evidence] | None:
    """The evidence model of `rule`, None for a rule this release does not know (a snapshot
    written by another)."""
    return EVIDENCE.get(rule)
