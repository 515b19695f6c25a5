"""The findings' registry (analysis/findings/registry.py): a rule's name is written once, in
`@rule(Rule.NAME)`, and the registry stamps it on every finding the rule returns."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from profiler_service.analysis.findings import RULES, evaluate, registry
from profiler_service.analysis.findings.registry import rule
from profiler_service.analysis.models import Finding, Severity, Summary


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


def test_a_rule_is_silent_where_a_rule_it_names_fired_and_each_runs_once(monkeypatch):
    """Relations are declared (`silenced_by`) and applied by the registry, silencers first,
    whatever the order rules were registered in; a rule never calls another."""
    calls: list[str] = []

    def fires(name: str):
        def run(summary: Summary) -> Finding:
            calls.append(name)
            return Finding(severity=Severity.INFO, title=name)

        return run

    monkeypatch.setattr(registry, "RULES", {})
    monkeypatch.setattr(registry, "SILENCED_BY", {})
    registry.rule("dependent", silenced_by=("silencer",))(fires("dependent"))
    registry.rule("free")(fires("free"))
    registry.rule("silencer")(fires("silencer"))
    assert {f.rule for f in registry.evaluate(Summary())} == {"silencer", "free"}
    assert sorted(calls) == ["free", "silencer"]  # the silenced rule did not even run
    assert registry.evaluation_order().index("silencer") < registry.evaluation_order().index(
        "dependent"
    )
    registry.rule("loop_a", silenced_by=("loop_b",))(fires("a"))
    registry.rule("loop_b", silenced_by=("loop_a",))(fires("b"))
    with pytest.raises(ValueError, match="cycle"):
        registry.evaluation_order()


def test_the_real_relations():
    silenced_by = registry.SILENCED_BY
    assert silenced_by["tensor_cores_unused"] == ("mixed_precision",)
    assert silenced_by["device_idle"] == silenced_by["gpu_imbalance"] == ("device_trace_missing",)
