"""docs/reference/http-api.md: every route of the service's own OpenAPI document.

A running service also serves the document at `/openapi.json` and as a page at `/docs`.
"""

from __future__ import annotations

import importlib.util
import re
import types
import typing
from typing import Any

from pydantic import BaseModel

from profiler_service.api.app import create_app
from profiler_service.docs_reference.markdown import cell, code, table

INTRO = """# HTTP API

Generated from the service's OpenAPI document; a running service serves it at `/openapi.json`,
and as a page at `/docs` that needs no network. Errors are JSON
`{"error": CODE, "detail": SENTENCE}` ([codes](errors-and-outcomes.md#http-errors)). With
`PROFILER_API_TOKEN` set, routes that change something need `Authorization: Bearer <token>`;
the webhooks take their own credentials ([alert-triggered captures](../alerts.md)).

"""

_METHODS = ("get", "post", "put", "delete", "patch")


def openapi() -> dict[str, Any]:
    """The document the service serves (routes need no service to be described)."""
    return create_app(None).openapi()  # type: ignore[arg-type]


def hub_openapi() -> dict[str, Any] | None:
    """The fleet hub's document, where the package has a hub (`profiler-service hub`)."""
    if importlib.util.find_spec("profiler_service.hub") is None:
        return None
    from profiler_service.hub.app import create_hub_app

    return create_hub_app(None).openapi()  # type: ignore[arg-type]


def render() -> str:
    doc = openapi()
    parts = [INTRO, table(["method and path", "does"], list(_summary_rows(doc, "")))]
    parts += _operations(doc, "")
    parts.append(renamed_fields())
    hub = hub_openapi()
    if hub is not None:
        # The hub serves the sidecar's read routes too; only its own are described here.
        for path, item in hub["paths"].items():
            for method in list(item):
                same = doc["paths"].get(path, {}).get(method, {})
                if same.get("operationId") == item[method].get("operationId"):
                    del item[method]
        hub["paths"] = {path: item for path, item in hub["paths"].items() if item}
        parts += [
            "# Fleet hub\n\n`profiler-service hub` serves the sidecar's read routes "
            "(`GET /profiles`, reports, files, `/metrics`, health) over the fleet's bucket, its "
            "webhooks (`POST /webhooks/grafana`, `/webhooks/alertmanager`: each alert routed "
            "to the sidecar it names, [fleet](../fleet.md)) and `GET /webhooks/alerts`, and "
            "these of its own:\n",
            table(["method and path", "does"], list(_summary_rows(hub, "Hub: "))),
            *_operations(hub, "Hub: "),
        ]
    return "\n".join(parts)


def renamed_fields() -> str:
    """The JSON fields renamed, each still read in its old spelling, and since when."""
    from profiler_service.analysis.findings import EVIDENCE
    from profiler_service.analysis.models import Summary
    from profiler_service.analysis.renamed_fields import RENAMED

    where = _places(Summary, "summary")
    where |= {model.__name__: f"findings[].evidence ({rule})" for rule, model in EVIDENCE.items()}
    # The summary's first, then each rule's in the registry's order: not the order the models
    # happened to be imported in, which differs between entry points (an evidence model that
    # a reader below the findings imports, input_bound's, is defined earlier under pytest).
    rule_order = {model.__name__: i for i, model in enumerate(EVIDENCE.values())}
    renamed = sorted(RENAMED, key=lambda r: rule_order.get(r.model, -1))
    rows = [(code(where.get(r.model, r.model)), code(r.old), code(r.new), r.since) for r in renamed]
    return (
        "## Renamed fields\n\n"
        "A proportion is a share, 0-1 (`_share`); a percentage is for display only. These fields "
        "held a percentage, 0-100 (`_pct`), before the release named: answers carry the new "
        "name only, and the old one is still read, divided by 100, so a snapshot written "
        "before (in a store or a bucket) reads with its shares.\n\n"
        + table(["in", "old name (still read)", "new name", "since"], rows)
    )


def _places(model: type[BaseModel], path: str) -> dict[str, str]:
    """Each model inside `model`, by class name: its place in the JSON (`summary.gpu.hosts[]`)."""
    found: dict[str, str] = {}
    for name, field in model.model_fields.items():
        inner, suffix = field.annotation, ""
        if typing.get_origin(inner) in (typing.Union, types.UnionType):
            inner = next(a for a in typing.get_args(inner) if a is not type(None))
        if typing.get_origin(inner) is list:
            inner, suffix = typing.get_args(inner)[0], "[]"
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            place = f"{path}.{name}{suffix}"
            found.setdefault(inner.__name__, place)
            found |= {k: v for k, v in _places(inner, place).items() if k not in found}
    return found


def _operations(doc: dict[str, Any], prefix: str) -> list[str]:
    return [
        _operation(doc, f"{prefix}{method.upper()} {path}", item[method])
        for path, item in doc["paths"].items()
        for method in _METHODS
        if method in item
    ]


def _summary_rows(doc: dict[str, Any], prefix: str):
    for path, item in doc["paths"].items():
        for method in _METHODS:
            if method in item:
                op = item[method]
                yield (
                    f"[{code(f'{method.upper()} {path}')}]"
                    f"(#{_anchor(f'{prefix}{method.upper()} {path}')})",
                    (op.get("description") or op.get("summary", "")).strip().split("\n")[0],
                )


def _anchor(heading: str) -> str:
    """The heading's own slug, as MkDocs (Python-Markdown's toc) and GitHub both make it."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The schema itself, `$ref`s followed (within `anyOf` too)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return _resolve(doc, doc["components"]["schemas"][name])
    if "anyOf" in schema:
        return {**schema, "anyOf": [_resolve(doc, s) for s in schema["anyOf"]]}
    return schema


def _operation(doc: dict[str, Any], heading: str, op: dict[str, Any]) -> str:
    lines = [f"## {heading}\n"]
    description = op.get("description") or op.get("summary") or ""
    if description:
        lines.append(description.strip() + "\n")
    params = op.get("parameters", [])
    if params:
        rows = [
            (
                code(p["name"]),
                p["in"],
                _schema_type(_resolve(doc, p.get("schema", {}))),
                _default(p.get("schema", {})),
                ("required; " if p.get("required") else "") + p.get("description", ""),
            )
            for p in params
        ]
        lines.append(table(["parameter", "in", "type", "default", "description"], rows))
    body = op.get("requestBody", {}).get("content", {})
    if body:
        lines.append("Body: " + ", ".join(code(kind) for kind in body) + ".\n")
    responses = [
        f"{code(status)} {cell(answer.get('description', ''))}{_model(answer)}"
        for status, answer in op.get("responses", {}).items()
    ]
    lines.append("Answers: " + "; ".join(responses) + ".\n")
    return "\n".join(lines)


def _model(answer: dict[str, Any]) -> str:
    """` (SnapshotPublic)`: the JSON schema a response carries, when it names one."""
    for content in answer.get("content", {}).values():
        ref = content.get("schema", {}).get("$ref")
        if ref:
            return f" ({code(ref.rsplit('/', 1)[-1])})"
    return ""


def _schema_type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        kinds = [_schema_type(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(kinds)
    if "enum" in schema:
        return "one of " + ", ".join(code(v) for v in schema["enum"])
    kind = schema.get("type", "")
    if kind == "array":
        return f"list of {_schema_type(schema.get('items', {}))}"
    bounds = [
        f"{sign} {schema[key]}"
        for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"))
        if key in schema
    ]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema or schema["default"] is None:
        return ""
    value = schema["default"]
    return code(str(value).lower() if isinstance(value, bool) else value)
