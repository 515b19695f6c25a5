"""docs/reference/configuration.md: every setting, one section per settings group, from each
field's `Field(description=...)`."""

from __future__ import annotations

import argparse
import json
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from profiler_service.cli import build_parser
from profiler_service.config import Group, HubSettings, Settings
from profiler_service.docs_reference.markdown import code, table

INTRO = """# Configuration

Every setting is an environment variable prefixed `PROFILER_`; some are also a flag of
`profiler-service` commands (flags win). In the Helm chart, any setting goes in
`sidecar.settings` by its name (`{duration_max_s: 10}` becomes `PROFILER_DURATION_MAX_S=10`).
Lists and objects are JSON. Bad values fail at start-up, naming the setting. Descriptions name
other settings by their field name (`api_token` is `PROFILER_API_TOKEN`).

The settings come in groups, one per stage (`profiler_service/config/`): each part of the
service reads its own group. A sidecar (and the agent) reads every group but the hub's own; the
hub (`profiler-service hub`) reads the groups marked so, and ignores the others' variables.

"""

_BOUNDS = {
    annotated_types.Ge: ("ge", "≥ {}"),
    annotated_types.Gt: ("gt", "> {}"),
    annotated_types.Le: ("le", "≤ {}"),
    annotated_types.Lt: ("lt", "< {}"),
}


def groups() -> dict[str, type[Group]]:
    """Every group by its attribute name: the sidecar's, then the hub's own. Where both read a
    group, the sidecar's class may add fields the hub never reads (its store's retention, its
    alerts' cooldown): the section shows the sidecar's, and names what the hub leaves out."""
    found = dict(Settings.groups())
    for attribute, group in HubSettings.groups().items():
        found.setdefault(attribute, group)
    return found


def all_fields() -> dict[str, FieldInfo]:
    """Every setting's field by its outward name, over both roots."""
    return {**Settings.fields(), **HubSettings.fields()}


def render() -> str:
    flags = cli_flags()
    sections = []
    for attribute, group in groups().items():
        readers = [
            who
            for who, root in (("sidecar", Settings), ("hub", HubSettings))
            if attribute in root.groups()
        ]
        hubs = HubSettings.groups().get(attribute)
        left_out = [n for n in group.outward() if hubs and n not in hubs.outward()]
        if left_out:
            names = ", ".join(code(f"PROFILER_{n.upper()}") for n in left_out)
            readers[-1] += f" (all but {names}: the sidecar's alone)"
        rows = [
            (
                code(f"PROFILER_{name.upper()}")
                + "".join(
                    f"<br>{code(flag)} ({', '.join(cmds)})" for flag, cmds in flags[name].items()
                ),
                type_name(field.annotation),
                default_of(field),
                allowed(field),
                description_of(name, field),
            )
            for name, field in group.fields().items()
        ]
        sections.append(
            f"## {attribute} (`{group.__name__}`)\n\n{_doc(group)} Read by: "
            f"{' and '.join(readers)}.\n\n"
            + table(["variable", "type", "default", "allowed", "description"], rows)
        )
    return INTRO + "\n".join(sections)


def _doc(group: type[Group]) -> str:
    return " ".join((group.__doc__ or "").split())


def cli_flags() -> dict[str, dict[str, list[str]]]:
    """{setting: {flag: [commands]}} for the command-line options that set a setting."""
    found: dict[str, dict[str, list[str]]] = {name: {} for name in all_fields()}
    for action in build_parser()._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for command, parser in action.choices.items():
            for option in parser._actions:
                if option.dest in found and option.option_strings:
                    found[option.dest].setdefault(option.option_strings[-1], []).append(command)
    return found


def description_of(name: str, field: FieldInfo) -> str:
    if not field.description:
        raise ValueError(
            f"setting {name} has no description: give it Field(description=...) in its "
            "group (profiler_service/config/)"
        )
    return field.description


def type_name(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"object of {type_name(args[1])}"
    if annotation is SecretStr:
        return "secret"
    if annotation is Path:
        return "path"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.__name__
    return getattr(annotation, "__name__", str(annotation))


def default_of(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, float) and value.is_integer():
        return code(int(value))
    if isinstance(value, Path):
        return code(value if value.is_absolute() else f"./{value}")
    if isinstance(value, list | dict):
        plain = [v.model_dump() if isinstance(v, BaseModel) else v for v in value]
        text = json.dumps(plain if isinstance(value, list) else value)
        return code(text) if len(text) <= 60 else f"{len(value)} entries (see description)"
    return code(value)


def allowed(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        for kind, (attr, form) in _BOUNDS.items():
            if isinstance(meta, kind):
                parts.append(form.format(getattr(meta, attr)))
        if isinstance(meta, annotated_types.MinLen) and meta.min_length:
            parts.append(f"at least {meta.min_length} characters")
        pattern = getattr(meta, "pattern", None)
        if pattern:
            parts.append(f"matches {code(pattern)}")
    return ", ".join(parts)
