"""Markdown tables for the generated pages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def cell(text: object) -> str:
    """One table cell, lines joined; pipes escaped outside code spans (Python-Markdown's tables
    leave a pipe inside backticks alone, and would show the backslash there)."""
    parts = " ".join(str(text).split()).split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: object) -> str:
    return f"`{text}`"
