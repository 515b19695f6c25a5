"""The rules' registry: `@rule` registers a rule by name, `evaluate()` runs them all.

The rule modules import this module, and the package imports them: no module imports the package
that imports it (tests/test_import_cycles.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from profiler_service.analysis import impact, where
from profiler_service.analysis.evidence.base import Evidence
from profiler_service.analysis.framework_advice import speak
from profiler_service.analysis.models import Finding, Summary

log = logging.getLogger(__name__)

Rule = Callable[[Summary], Finding | None]
RULES: dict[str, Rule] = {}
# rule -> the rules whose finding silences it (their finding says the same, or says that what
# it reads cannot be trusted); the registry applies it, the rules never call each other.
SILENCED_BY: dict[str, tuple[str, ...]] = {}
# rule -> the model of its finding's `evidence`, where it declares one: the rule fills it, the
# readers (impact models, advice, the corpus) read it typed, the catalogue lists its fields.
EVIDENCE: dict[str, type[Evidence]] = {}


def rule(
    name: str,
    *,
    silenced_by: tuple[str, ...] = (),
    evidence: type[Evidence] | None = None,
) -> Callable[[Rule], Rule]:
    """Register a rule under `name`, the one place its name is written: the registry stamps it
    on every finding the rule returns, and skips it where a rule of `silenced_by` fired.
    `evidence`: the model its finding's evidence is checked against."""

    def register(func: Rule) -> Rule:
        if name in RULES:
            raise ValueError(f"rule {name!r} registered twice")
        SILENCED_BY[name] = tuple(silenced_by)
        if evidence is not None:
            EVIDENCE[name] = evidence

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
    """Every rule's finding with its impact and, where the capture holds the job's Python
    stacks, the user's code it is in (`where`); what its fix saves first (the first is "fix
    this first"), then the most severe; a broken rule (or model) is logged and skipped."""
    findings = []
    fired: set[str] = set()
    for name in evaluation_order():
        if fired.intersection(SILENCED_BY.get(name, ())):
            continue
        func = RULES[name]
        try:
            finding = func(summary)
            if finding is not None:
                finding.impact = impact.estimate(finding, summary)
                finding = where.attribute(speak(finding, summary), summary)
        except Exception:
            log.exception("rule %s failed", name)
            continue
        if finding is not None:
            findings.append(finding)
            fired.add(name)
    return sorted(findings, key=impact.rank)


def evaluation_order() -> list[str]:
    """The rules in registration order, each after the rules that silence it."""
    order: list[str] = []
    placing: set[str] = set()

    def place(name: str) -> None:
        if name in order:
            return
        if name in placing:
            raise ValueError(f"rules silence each other in a cycle through {name!r}")
        placing.add(name)
        for silencer in SILENCED_BY.get(name, ()):
            if silencer not in RULES:
                raise ValueError(f"rule {name!r} is silenced by {silencer!r}, not a rule")
            place(silencer)
        order.append(name)

    for name in RULES:
        place(name)
    return order


def share(part_ms: float | None, whole_ms: float | None) -> float:
    return part_ms / whole_ms if part_ms and whole_ms else 0.0
