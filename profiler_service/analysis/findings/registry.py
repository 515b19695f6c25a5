"""The findings' registry: `@rule` registers a rule under its `Rule` name with all it brings
(its evidence's model, its impact model, its advice in other frameworks, the rules that silence
it); `evaluate()` runs them all.

The area modules import this module, and the package imports them: no module imports the package
that imports it (tests/test_import_cycles.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from profiler_service.analysis import where
from profiler_service.analysis.findings.advice import ROCM_NAMES, Advice
from profiler_service.analysis.findings.impact import ImpactModel, nothing
from profiler_service.analysis.models import Finding, Impact, Summary
from profiler_service.analysis.readers.framework import Framework
from profiler_service.analysis.renamed_fields import EVIDENCE_RENAMES
from profiler_service.analysis.rule import Evidence, Rule, rank

log = logging.getLogger(__name__)

RuleFunc = Callable[[Summary], Finding | None]
RULES: dict[Rule, RuleFunc] = {}
# rule -> the rules whose finding silences it (their finding says the same, or says that what
# it reads cannot be trusted); the registry applies it, the rules never call each other.
SILENCED_BY: dict[Rule, tuple[Rule, ...]] = {}
# rule -> the model of its finding's `evidence`, where it declares one: the rule fills it, the
# readers (impact models, advice, the corpus) read it typed, the catalogue lists its fields.
EVIDENCE: dict[Rule, type[Evidence]] = {}
# rule -> what its fix saves; a rule without one saves nothing measurable.
IMPACT: dict[Rule, ImpactModel] = {}
# rule -> its advice in other frameworks' or vendors' words.
ADVICE: dict[Rule, Advice] = {}


def rule(
    name: Rule,
    *,
    silenced_by: tuple[Rule, ...] = (),
    evidence: type[Evidence] | None = None,
    impact: ImpactModel | None = None,
    advice: Advice | None = None,
) -> Callable[[RuleFunc], RuleFunc]:
    """Register a rule under `name`, the one place its name is written: the registry stamps it
    on every finding the rule returns, and skips it where a rule of `silenced_by` fired.
    `evidence`: the model its finding's evidence is checked against; `impact`: the model of
    what its fix saves; `advice`: its words for JAX jobs and AMD GPUs."""

    def register(func: RuleFunc) -> RuleFunc:
        if name in RULES:
            raise ValueError(f"rule {name!r} registered twice")
        SILENCED_BY[name] = tuple(silenced_by)
        if evidence is not None:
            EVIDENCE[name] = evidence
            if evidence.old_percentages:  # a stored finding's evidence is read in both spellings
                EVIDENCE_RENAMES[str(name)] = evidence.old_percentages
        if impact is not None:
            IMPACT[name] = impact
        if advice is not None:
            ADVICE[name] = advice

        @functools.wraps(func)
        def stamped(summary: Summary) -> Finding | None:
            finding = func(summary)
            if finding is not None:
                finding.rule = str(name)  # the snapshot holds the plain name
            return finding

        RULES[name] = stamped
        return stamped

    return register


def in_rule_order() -> None:
    """List the registered rules, and their evidence, in `Rule`'s order (the catalogue's),
    whatever order their modules were imported in; a name `Rule` lacks goes last."""
    members = list(Rule)

    def position(name: str) -> int:
        return members.index(name) if name in members else len(members)

    for table in (RULES, SILENCED_BY, EVIDENCE, IMPACT, ADVICE):
        ordered = sorted(table.items(), key=lambda item: position(item[0]))
        table.clear()
        table.update(ordered)


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
                finding.impact = estimate(finding, summary)
                finding = where.attribute(speak(finding, summary), summary)
        except Exception:
            log.exception("rule %s failed", name)
            continue
        if finding is not None:
            findings.append(finding)
            fired.add(name)
    return sorted(findings, key=rank)


def evaluation_order() -> list[Rule]:
    """The rules in registration order, each after the rules that silence it."""
    order: list[Rule] = []
    placing: set[Rule] = set()

    def place(name: Rule) -> None:
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


def estimate(finding: Finding, summary: Summary) -> Impact:
    """The finding's impact by its rule's model, or no measurable saving."""
    model = IMPACT.get(finding.rule)
    if model is None:
        return nothing(summary, "no model of what this fix saves in step time")
    return model(finding, summary)


def speak(finding: Finding, summary: Summary) -> Finding:
    """`finding` with its rule's advice in the job's framework and its GPUs' vendor's names."""
    advice = ADVICE.get(finding.rule, Advice())
    framework = summary.framework
    if framework in (Framework.JAX, Framework.KERAS3_JAX):
        said = advice.keras3_jax if framework == Framework.KERAS3_JAX else None
        if said is None:
            said = advice.jax(finding) if callable(advice.jax) else advice.jax
        if said:
            finding.recommendation = said
        if advice.jax_title is not None:
            finding.title = advice.jax_title(finding, summary)
    gpu = summary.gpu
    if gpu is not None and gpu.devices and all(d.vendor == "amd" for d in gpu.devices):
        if advice.rocm is not None:
            finding.recommendation = advice.rocm
        for nvidia, rocm in ROCM_NAMES:
            finding.recommendation = finding.recommendation.replace(nvidia, rocm)
    return finding


def share(part_ms: float | None, whole_ms: float | None) -> float:
    return part_ms / whole_ms if part_ms and whole_ms else 0.0
