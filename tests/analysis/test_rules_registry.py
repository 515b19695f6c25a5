"""The rules' registry (analysis/rules/registry.py): a rule's name is written once, in
`@rule("name")`, and the registry stamps it on every finding the rule returns."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from profiler_service.analysis.models import Finding, Severity, Summary
from profiler_service.analysis.rules import RULES, evaluate, registry
from profiler_service.analysis.rules.registry import rule


@pytest.fixture
def registered():
    """Rules registered by the test, removed after it."""
    names: list[str] = []
    yield names
    for name in names:
        RULES.pop(name, None)


def test_the_registry_stamps_the_rule_name_on_its_finding(registered):
    registered += ["test_stamped", "test_silent"]

    @rule("test_stamped")
    def stamped(summary: Summary) -> Finding | None:
        # no name given, or a wrong one: the registry's wins
        return Finding(rule="something_else", severity=Severity.CRITICAL, title="stamped")

    @rule("test_silent")
    def silent(summary: Summary) -> Finding | None:
        return None

    assert RULES["test_stamped"] is stamped and stamped.__name__ == "stamped"
    assert stamped(Summary()).rule == "test_stamped"
    assert silent(Summary()) is None
    mine = [f for f in evaluate(Summary()) if f.rule.startswith("test_")]
    assert [(f.rule, f.title) for f in mine] == [("test_stamped", "stamped")]


def test_no_rule_writes_its_own_name():
    """The name is the registration's alone: no rule module passes `rule=` to a Finding."""
    written = []
    for path in Path(registry.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                written += [f"{path.name}:{node.lineno}" for k in node.keywords if k.arg == "rule"]
    assert written == []
