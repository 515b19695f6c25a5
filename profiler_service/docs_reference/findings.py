"""docs/reference/findings.md: the rules' registry, each rule's docstring, thresholds, severity.

A rule's docstring says when it fires, naming its thresholds by their constants
(`ALL_OTHER_HIGH_SHARE`); the page puts each constant's value in its place and lists the
constants the rule reads, through the module's helper functions too.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from profiler_service.analysis.findings import EVIDENCE, IMPACT, RULES, SILENCED_BY
from profiler_service.analysis.models import Severity
from profiler_service.docs_reference.markdown import code, table

INTRO = """# Findings

Every snapshot's summary goes through every rule below; each rule is one function in
`profiler_service/analysis/findings/` ("defined in") that returns a finding or nothing. A finding is
`{rule, severity, title, evidence{numbers}, recommendation, docs, impact_share, impact, where}`:
`impact_share` is the share of step time at stake, `impact` what the fix would save
(`{step_ms_now, step_ms_after, saving_share, saving_range, basis}`) by the rule's model in
`profiler_service/analysis/findings/` ("what its fix saves", with its factors' values). `where`
names the user's code the cause is in (`[{file, line, function, share}]`, most samples first),
read from the job's Python stacks where the capture holds them (the in-process agent samples
them, `python_stacks_hz`): for `input_bound` the user's functions tf.data runs in Python, for
`eager_execution`, `host_overhead` and `between_steps` the user's lines the loop's Python holds
(`profiler_service/analysis/where.py`); it is empty for the other rules and for captures without
stacks. A
snapshot's findings are ordered by `saving_share`, then most severe first; the first is the one to
fix first, and one that saves nothing measurable ranks last. How the rules read XProf's tools, and
what CPU-only captures can and cannot show: [Findings](../findings.md).

"""

_CONSTANT = re.compile(r"`([A-Z][A-Z0-9_]+)`")


def render() -> str:
    rows = []
    for name, func in RULES.items():
        constants = thresholds(func)
        rows.append(
            (
                code(name),
                fires_when(name, func, constants),
                " / ".join(severities(func)),
                "<br>".join(f"{code(k)} = {fmt(k, v)}" for k, v in constants.items()),
                saves_when(name),
                ", ".join(code(other) for other in SILENCED_BY.get(name, ())),
                code(
                    func.__module__.removeprefix("profiler_service.analysis.").replace(".", "/")
                    + ".py"
                ),
            )
        )
    header = ["rule", "fires when", "severity", "thresholds", "what its fix saves",
              "silent where this fired", "defined in"]  # fmt: skip
    return INTRO + table(header, rows) + evidence_section()


def evidence_section() -> str:
    """The typed evidence of each rule (`@rule(..., evidence=Model)`, beside the rule in
    analysis/findings/): each field, its type, what it holds; a list of objects, each item's
    fields too."""
    if not EVIDENCE:
        return ""
    parts = [
        "\n## Evidence\n\n"
        "What a finding read, field by field: its rule's model "
        "(`profiler_service/analysis/findings/`), whose fields are the keys of the finding's "
        "`evidence` in `snapshot.json`. A rule with two readings (XProf's figure, or the GPU's "
        "own plane or the capture's events) writes the fields of the reading it made only.\n"
    ]
    for name, model in EVIDENCE.items():
        parts.append(
            f"\n### {code(name)}\n\n" + table(["field", "type", "holds"], _field_rows(model))
        )
    return "".join(parts)


def _field_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str]]:
    rows = []
    for field, info in model.model_fields.items():
        rows.append(
            (code(prefix + field), code(_type_name(info.annotation)), info.description or "")
        )
        for item in typing.get_args(info.annotation):
            if isinstance(item, type) and issubclass(item, BaseModel):
                rows += _field_rows(item, f"{prefix}{field}[].")
    return rows


def _type_name(annotation: Any) -> str:
    """`str or None`, `list[AliveAtPeak]`: a table cell holds no `|`, nor a module's path."""
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or _MODULE_PATH.sub("", str(annotation))
    return text.replace(" | ", " or ")


_MODULE_PATH = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+(?=[A-Za-z_])")


def saves_when(name: str) -> str:
    """The rule's impact model's docstring, its factors' values in place."""
    model = IMPACT.get(name)
    if model is None:
        raise ValueError(f"rule {name} has no impact model: declare one on its @rule (impact=...)")
    return fires_when(name, model, thresholds(model))


def fires_when(name: str, func: Callable[..., Any], constants: dict[str, Any]) -> str:
    doc = inspect.getdoc(func)
    if not doc:
        raise ValueError(
            f"rule {name!r} ({func.__module__}) has no docstring: say when it fires, naming its "
            "thresholds by their constants"
        )
    module = vars(inspect.getmodule(func))

    def value(match: re.Match[str]) -> str:
        key = match[1]
        if key not in module:
            raise ValueError(f"rule {name!r}'s docstring names {key}, which its module lacks")
        return fmt(key, module[key])

    return _CONSTANT.sub(value, doc)


def _names_read(func: Callable[..., Any]) -> list[str]:
    """Global names the function's code reads, nested code (lambdas, comprehensions) and the
    same module's helper functions included, in order of first use."""
    module = inspect.getmodule(func)
    seen: list[str] = []
    todo = [inspect.unwrap(func).__code__]  # the rule itself, not the registry's stamping
    done: set[types.CodeType] = set()
    while todo:
        co = todo.pop(0)
        if co in done:
            continue
        done.add(co)
        for name in co.co_names:
            if name not in seen:
                seen.append(name)
            helper = getattr(module, name, None)
            if inspect.isfunction(helper) and helper.__module__ == module.__name__:
                todo.append(inspect.unwrap(helper).__code__)
        todo += [c for c in co.co_consts if isinstance(c, types.CodeType)]
    return seen


def thresholds(func: Callable[..., Any]) -> dict[str, Any]:
    module = vars(inspect.getmodule(func))
    return {
        name: module[name]
        for name in _names_read(func)
        if name.isupper()
        and isinstance(module.get(name), int | float)
        and not isinstance(module.get(name), bool)
    }


def severities(func: Callable[..., Any]) -> list[str]:
    module = vars(inspect.getmodule(func))
    found: set[Severity] = set()
    names = _names_read(func)
    for name in names:
        value = module.get(name)
        if isinstance(value, dict):
            found |= {v for v in value.values() if isinstance(v, Severity)}
        if name in Severity.__members__ and "Severity" in names:
            found.add(Severity[name])
    return [s.value for s in Severity if s in found]


def fmt(name: str, value: float | tuple[float, ...]) -> str:
    """A threshold in its unit, from the constant's name; a range as its least to its most."""
    if isinstance(value, tuple):
        return " to ".join(fmt(name, v) for v in value)
    if "_SHARE" in name:
        return f"{value * 100:g} %"
    if name.endswith("_S"):
        return f"{value / 3600:g} h" if value >= 3600 else f"{value:g} s"
    if name.endswith("_BYTES"):
        return f"{value / 2**20:g} MiB"
    if name.endswith("_MS"):
        return f"{value:g} ms"
    return f"{value:g}"
