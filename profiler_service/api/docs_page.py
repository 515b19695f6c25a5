"""`GET /docs`: the API's own OpenAPI document as one plain HTML page, served offline.

FastAPI's default `/docs` (Swagger UI) and `/redoc` load their scripts and styles from a CDN, so
on a cluster without egress, or a laptop offline, they are blank pages. No installed package
ships Swagger UI's assets (it would take a new dependency of a few megabytes in every sidecar
image, for a page most users open once); the document itself is all a reader needs, so this
page renders it on the server, without a script: every route with its parameters and answers,
and every schema with its fields. `/openapi.json` stays the machine-readable document.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

__all__ = ["install_docs_page", "render_docs_page"]

_METHODS = ("get", "post", "put", "delete", "patch")
_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; margin: 2em auto; max-width: 62em; padding: 0 1em;
       color: #1d2733; }
h1 { margin-bottom: 0; } h2 { margin-top: 2em; border-top: 1px solid #d0d7de; padding-top: 1em; }
code, .path { font-family: ui-monospace, monospace; }
.method { font-weight: 600; padding: 0 .4em; border-radius: 3px; background: #e8eef5; }
.text { white-space: pre-line; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { text-align: left; vertical-align: top; padding: .2em .8em .2em 0;
         border-bottom: 1px solid #eaeef2; }
th { font-weight: 600; }
"""


def install_docs_page(app: FastAPI) -> None:
    """Serve `/docs` from the app's own document (FastAPI's are turned off by the caller:
    `FastAPI(docs_url=None, redoc_url=None)`)."""

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def read_docs_page() -> HTMLResponse:
        return HTMLResponse(render_docs_page(app.openapi()))


def render_docs_page(doc: dict[str, Any]) -> str:
    info = doc.get("info", {})
    title = escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>",
        f"<style>{_STYLE}</style></head><body><h1>{title}</h1>",
        f"<p class='text'>{escape(info.get('summary') or info.get('description') or '')}</p>",
        "<p>The machine-readable document: <a href='openapi.json'><code>/openapi.json</code>"
        '</a>. Errors are JSON <code>{"error": CODE, "detail": SENTENCE}</code>.</p>',
        "<table id='routes'><tr><th>method and path</th><th>does</th></tr>",
    ]
    operations = [
        (method, path, item[method])
        for path, item in doc.get("paths", {}).items()
        for method in _METHODS
        if method in item
    ]
    for method, path, op in operations:
        parts.append(
            f"<tr><td><a href='#{_anchor(method, path)}'><span class='method'>"
            f"{method.upper()}</span> <span class='path'>{escape(path)}</span></a></td>"
            f"<td>{escape(_first_line(op))}</td></tr>"
        )
    parts.append("</table>")
    parts += [_operation(doc, method, path, op) for method, path, op in operations]
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        parts.append("<h2 id='schemas'>Schemas</h2>")
        parts += [_schema(name, schema) for name, schema in schemas.items()]
    parts.append("</body></html>")
    return "\n".join(parts)


def _anchor(method: str, path: str) -> str:
    return f"{method}-" + "".join(c if c.isalnum() else "-" for c in path).strip("-")


def _first_line(op: dict[str, Any]) -> str:
    return (op.get("summary") or op.get("description") or "").strip().split("\n")[0]


def _operation(doc: dict[str, Any], method: str, path: str, op: dict[str, Any]) -> str:
    lines = [
        f"<h2 id='{_anchor(method, path)}'><span class='method'>{method.upper()}</span> "
        f"<span class='path'>{escape(path)}</span></h2>",
        f"<p class='text'>{escape((op.get('description') or op.get('summary') or '').strip())}</p>",
    ]
    params = op.get("parameters", [])
    if params:
        lines.append(
            "<table><tr><th>parameter</th><th>in</th><th>type</th><th>default</th>"
            "<th>description</th></tr>"
        )
        for p in params:
            schema = p.get("schema", {})
            default = "" if schema.get("default") is None else json.dumps(schema["default"])
            lines.append(
                f"<tr><td><code>{escape(p['name'])}</code></td><td>{escape(p['in'])}</td>"
                f"<td>{_type(schema)}</td>"
                f"<td>{f'<code>{escape(default)}</code>' if default else ''}</td>"
                f"<td>{'required; ' if p.get('required') else ''}"
                f"{escape(p.get('description', ''))}</td></tr>"
            )
        lines.append("</table>")
    body = op.get("requestBody", {}).get("content", {})
    if body:
        kinds = ", ".join(f"<code>{escape(kind)}</code> {_type(c.get('schema', {}))}"
                          for kind, c in body.items())  # fmt: skip
        lines.append(f"<p>Body: {kinds}</p>")
    lines.append("<table><tr><th>answer</th><th>what</th><th>body</th></tr>")
    for status, answer in op.get("responses", {}).items():
        content = answer.get("content", {})
        schema = next((c.get("schema", {}) for c in content.values()), {})
        lines.append(
            f"<tr><td><code>{escape(str(status))}</code></td>"
            f"<td>{escape(answer.get('description', ''))}</td>"
            f"<td>{_type(schema) if schema else ''}</td></tr>"
        )
    lines.append("</table>")
    return "\n".join(lines)


def _schema(name: str, schema: dict[str, Any]) -> str:
    lines = [f"<h3 id='schema-{escape(name)}'>{escape(name)}</h3>"]
    if schema.get("description"):
        lines.append(f"<p class='text'>{escape(schema['description'])}</p>")
    if "enum" in schema:
        lines.append(f"<p>one of {_type(schema)}</p>")
    properties = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", []))
        lines.append("<table><tr><th>field</th><th>type</th><th>description</th></tr>")
        for field, spec in properties.items():
            lines.append(
                f"<tr><td><code>{escape(field)}</code>{' (required)' if field in required else ''}"
                f"</td><td>{_type(spec)}</td><td>{escape(spec.get('description', ''))}</td></tr>"
            )
        lines.append("</table>")
    return "\n".join(lines)


def _type(schema: dict[str, Any]) -> str:
    """A schema's type in a few words, a named one linked to its section."""
    if "$ref" in schema:
        name = escape(schema["$ref"].rsplit("/", 1)[-1])
        return f"<a href='#schema-{name}'>{name}</a>"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            kinds = [_type(s) for s in schema[key] if s.get("type") != "null"]
            return " or ".join(kinds) or "null"
    if "enum" in schema:
        return "one of " + ", ".join(f"<code>{escape(str(v))}</code>" for v in schema["enum"])
    kind = schema.get("type", "")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    return escape(str(kind or "any"))
