"""Calls of XProf's converters, with their error message kept (the high-level API hides it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ToolFailed(Exception):
    pass


def load_xprof() -> None:
    """Import XProf's converters now: a warm worker pays for it before a capture needs it."""
    from xprof.convert import _pywrap_profiler_plugin, raw_to_tool_data  # noqa: F401


def tool_names(xplane_paths: Sequence[Path]) -> list[str]:
    from xprof.convert import raw_to_tool_data

    return raw_to_tool_data.xspace_to_tool_names([str(p) for p in xplane_paths])


def tool_data(xplane_paths: Sequence[Path], tool: str, *, use_saved_result: bool = True) -> Any:
    """A tool's output as parsed JSON (a list of Google DataTables for most tools).

    `use_saved_result` lets every tool after the first reuse the op stats XProf caches beside
    the capture, so the whole analysis costs little more than the overview page alone. The
    cache has one name whatever the hosts read, and is written even without
    `use_saved_result`: read one host of several from a directory of its own (summary.py).
    """
    from xprof.convert import _pywrap_profiler_plugin

    raw, ok = _pywrap_profiler_plugin.xspace_to_tools_data(
        [str(p) for p in xplane_paths], tool, {"use_saved_result": use_saved_result}
    )
    if not ok:
        message = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        raise ToolFailed(f"XProf's {tool} converter failed: {message[:500]}")
    return json.loads(raw)


def table_with(tables: list[dict], prop: str) -> dict | None:
    """The DataTable whose properties contain `prop` (XProf does not name its tables)."""
    return next((t for t in tables if prop in (t.get("p") or {})), None)


def table_with_column(tables: list[dict], column: str) -> dict | None:
    return next((t for t in tables if any(c.get("id") == column for c in t.get("cols", []))), None)


def rows_as_dicts(table: dict) -> list[dict[str, Any]]:
    """DataTable rows keyed by column id."""
    ids = [c.get("id") for c in table.get("cols", [])]
    return [
        {key: (cell or {}).get("v") for key, cell in zip(ids, row.get("c", []), strict=False)}
        for row in table.get("rows", [])
    ]


def as_float(value: Any) -> float | None:
    """XProf writes numbers as strings, some with a trailing `%`."""
    if value in (None, ""):
        return None
    try:
        return float(str(value).rstrip("%"))
    except ValueError:
        return None
