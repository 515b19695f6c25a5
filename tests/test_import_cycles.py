"""No import cycle in the package, counting every import: module level, inside functions and
under TYPE_CHECKING. A cycle hidden behind a lazy import is still two modules that each need the
other; the fix is to pass in what one reads (metrics take callables, the store takes a sync)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "profiler_service"


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported_from(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The absolute module of `from ... import` in module `name`, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return base


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports (a `from x import y` may name module x.y)."""
    named = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, name, path)
            named |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    found = set()
    for module in named:
        while module and module not in known:
            module = module.rpartition(".")[0]
        if module and module != name:
            found.add(module)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_finder_sees_a_cycle_behind_a_lazy_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycle():
    known = module_names()
    assert "profiler_service.service" in known and "profiler_service.store.mirror_sync" in known
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert "profiler_service.store.snapshot_store" in graph["profiler_service.store.mirror_sync"]
    assert cycles(graph) == []


def package_of(name: str) -> str:
    """`profiler_service.hub.index.writes` -> `hub`; a module at the package's root (service.py,
    models.py) is a package of its own; "" for `profiler_service` itself (its version)."""
    return name.split(".")[1] if name.count(".") else ""


def package_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Which packages each package imports, every import of every module counted."""
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        here = package_of(name)
        if not here:
            continue
        graph.setdefault(here, set())
        for imported in imports_of(name, path, known):
            there = package_of(imported)
            if there and there != here:
                graph[here].add(there)
                graph.setdefault(there, set())
    return graph


def test_no_two_packages_import_each_other():
    """Nor between the packages (capture/, trigger/, hub/, ...) and the modules at the root
    (service.py, models.py), even through others: a neutral module (durations.py, errors.py,
    sidecar_record.py) holds what both read. `hub/` -> `api/` -> `service.py` is fine; the
    sidecar's registration beside service.py, not in hub/, keeps it from coming back. The
    snapshot (models.py) holds what analysis/ computes and what verification_record.py records;
    the comparisons (across/) and the text report (exporters/) read snapshots, above all three."""
    graph = package_graph(module_names())
    assert "capture" in graph["trigger"] and "service" in graph["api"]
    assert "registration" in graph["service"] and "sidecar_record" in graph["hub"]
    assert {"analysis", "verification_record"} <= graph["models"]
    assert "models" in graph["across"] and "across" in graph["exporters"]
    assert cycles(graph) == []


def test_the_package_graph_sees_a_cycle_through_a_root_module(tmp_path):
    """A cycle between packages that no two modules close: service.py -> hub/ -> api/ ->
    service.py, each module importing a different one."""
    root = tmp_path / "profiler_service"
    for folder in ("hub", "api"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "service.py").write_text("def build():\n    from profiler_service.hub import reg\n")
    (root / "hub" / "reg.py").write_text("")
    (root / "hub" / "app.py").write_text("from profiler_service.api import auth\n")
    (root / "api" / "auth.py").write_text("")
    (root / "api" / "app.py").write_text("from profiler_service import service\n")
    known = {
        ".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
        for p in root.rglob("*.py")
    }
    module_graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert cycles(module_graph) == []
    assert cycles(package_graph(known)) == [["api", "hub", "service"]]


def test_no_private_name_is_imported_from_another_package():
    """A name with a leading underscore stays in its package: another package asks for a
    public one (hub/views.py renders with `exporters.report.templates()`, not a private
    `_environment`)."""
    found = []
    for name, path in module_names().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = imported_from(node, name, path)
            if base.startswith("profiler_service.") and package_of(base) != package_of(name):
                found += [
                    f"{name}: {base}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert found == []


# The sidecar's pipeline: what captures, analyses, samples and triggers. The hub serves reads,
# the fleet and alert routing over the bucket's index, and loads none of it.
SIDECAR_PIPELINE = (
    "profiler_service.service",
    "profiler_service.api.sidecar",
    "profiler_service.capture.controller",
    "profiler_service.analysis.runner.analyzer",
    "profiler_service.analysis.findings",
    "profiler_service.analysis.readers.xplane",
    "profiler_service.lookback.sampler",
    "profiler_service.trigger.alerts",
    "profiler_service.trigger.schedule",
    "profiler_service.trigger.memory_watch",
    "profiler_service.exporters.metrics",
    "profiler_service.store.upload_queue",
    "profiler_service.registration",  # the sidecar's heartbeat to the hub
)


def test_the_hub_imports_no_sidecar_pipeline():
    probe = (
        "import sys, json; import profiler_service.hub.app, profiler_service.hub.fleet; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = set(json.loads(subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout))  # fmt: skip
    assert "profiler_service.hub.routes" in loaded  # the probe imported the hub
    assert sorted(loaded.intersection(SIDECAR_PIPELINE)) == []


def room_of(name: str, rooms: set[str]) -> str:
    """`profiler_service.analysis.readers.xplane` -> `analysis.readers`; a module at analysis/'s
    root (models.py, summary.py) is a room of its own."""
    parts = name.split(".")
    if len(parts) > 2 and f"{parts[1]}.{parts[2]}" in rooms:
        return f"{parts[1]}.{parts[2]}"
    return ".".join(parts[1:])


def test_no_two_analysis_rooms_import_each_other():
    """analysis/'s rooms stack: the readers under the summary's assembly, the findings
    (findings/) over the summary, the runner over both (the comparisons across snapshots, across/,
    are a package of their own above the snapshot model). A subpackage of analysis/ counts as one
    room, everything it holds together, and each module at analysis/'s root as one more."""
    known = module_names()
    rooms = {
        ".".join(n.split(".")[1:])
        for n, p in known.items()
        if n.startswith("profiler_service.analysis.") and p.name == "__init__.py"
    }
    assert {"analysis.readers", "analysis.runner", "analysis.findings"} <= rooms
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        if not name.startswith("profiler_service.analysis."):
            continue
        room = room_of(name, rooms)
        graph.setdefault(room, set())
        for imported in imports_of(name, path, known):
            if imported.startswith("profiler_service.analysis."):
                other = room_of(imported, rooms)
                if other != room:
                    graph[room].add(other)
                    graph.setdefault(other, set())
    assert "analysis.readers" in graph["analysis.summary"]
    assert "analysis.readers" in graph["analysis.runner"]  # the worker reads XProf's tools
    assert cycles(graph) == []


def test_the_data_layer_imports_nothing_of_the_api():
    """The stores and the hub's index keep what a listing holds (store/list_items.py); the API
    reads them and adds its links, never the reverse."""
    known = module_names()
    data = [
        n for n in known if n.startswith(("profiler_service.store", "profiler_service.hub.index"))
    ]
    assert "profiler_service.hub.index.writes" in data
    reaching = {
        n: sorted(m for m in imports_of(n, known[n], known) if m.startswith("profiler_service.api"))
        for n in data
    }
    assert {n: api for n, api in reaching.items() if api} == {}
