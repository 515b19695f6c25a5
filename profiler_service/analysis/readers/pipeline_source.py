"""Where the user's code hands a Python function to tf.data: the `tf.py_function(decode, ...)`,
`tf.numpy_function(...)` or `Dataset.from_generator(...)` call that wires it into the pipeline,
read from the user's own source with `ast` (the line to change when the advice is "move the
Python into TensorFlow ops").

TensorFlow's captures do not say it (TF 2.21 names no `Dataset.map` function: the ops inside a
map are bare, `PyFunc`), and the stacks only show the function running, not who wired it. The
source is read where the analysis runs: the agent's worker on the job's own machine reads it; a
sidecar without the job's files finds none and names the function alone.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from profiler_service.analysis.stack_models import CodeLine

__all__ = ["WIRING_CALLS", "find_wiring"]

# The calls that run a Python function inside a tf.data pipeline, and the keyword naming it.
WIRING_CALLS = {
    "py_function": "func",
    "numpy_function": "func",
    "py_func": "func",
    "eager_py_func": "func",
    "from_generator": "generator",
}
MAX_SOURCE_BYTES = 2 << 20  # a file larger than this is no training script: not parsed


def find_wiring(function: str, files: list[str]) -> CodeLine | None:
    """The first call in `files` (in order) that wires `function` (its qualified name, as the
    stacks give it) into tf.data; None where no readable file holds one."""
    name = function.rsplit(".", 1)[-1]
    if name.startswith("<"):
        return None  # a lambda: nothing names it at the call
    for file in dict.fromkeys(files):
        found = _wirings(file).get(name)
        if found is not None:
            return found
    return None


@lru_cache(maxsize=64)
def _wirings(file: str) -> dict[str, CodeLine]:
    """Each function name `file` wires into tf.data, with its first such call."""
    try:
        path = Path(file)
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return {}
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=file)
    except (OSError, ValueError, SyntaxError):
        return {}
    lines = source.splitlines()
    found: dict[str, CodeLine] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = _called_name(node.func)
        keyword = WIRING_CALLS.get(called or "")
        if keyword is None:
            continue
        target = (
            node.args[0]
            if node.args
            else next((k.value for k in node.keywords if k.arg == keyword), None)
        )
        wired = _called_name(target) if target is not None else None
        if wired and (wired not in found or node.lineno < found[wired].line):
            text = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
            found[wired] = CodeLine(file=file, line=node.lineno, code=text)
    return found


def _called_name(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None
