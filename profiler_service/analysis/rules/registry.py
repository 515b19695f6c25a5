"""The rules' registry: `@rule` registers a rule by name, `evaluate()` runs them all.

The rule modules import this module, and the package imports them: no module imports the package
that imports it (tests/test_import_cycles.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from profiler_service.analysis import impact
from profiler_service.analysis.framework_advice import speak
from profiler_service.analysis.models import Finding, Summary

log = logging.getLogger(__name__)

Rule = Callable[[Summary], Finding | None]
RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    """Register a rule under `name`, the one place its name is written: the registry stamps it
    on every finding the rule returns."""

    def register(func: Rule) -> Rule:
        if name in RULES:
            raise ValueError(f"rule {name!r} registered twice")

        @functools.wraps(func)
        def stamped(summary: Summary) -> Finding | None:
            finding = func(summary)
            if finding is not None:
                finding.rule = name
            return finding

        RULES[name] = stamped
        return stamped

    return register


def evaluate(summary: Summary) -> list[Finding]:
    """Every rule's finding with its impact, what its fix saves first (the first is "fix this
    first"), then the most severe; a broken rule (or model) is logged and skipped."""
    findings = []
    for name, func in RULES.items():
        try:
            finding = func(summary)
            if finding is not None:
                finding.impact = impact.estimate(finding, summary)
                finding = speak(finding, summary)
        except Exception:
            log.exception("rule %s failed", name)
            continue
        if finding is not None:
            findings.append(finding)
    return sorted(findings, key=impact.rank)


def share(part_ms: float | None, whole_ms: float | None) -> float:
    return part_ms / whole_ms if part_ms and whole_ms else 0.0
