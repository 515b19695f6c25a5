"""The human report page: findings first, then the evidence, then links to dig deeper."""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, select_autoescape

from profiler_service.analysis.compare import Comparison
from profiler_service.config import Settings
from profiler_service.exporters import charts
from profiler_service.exporters.links import snapshot_links
from profiler_service.models import Snapshot

SEVERITY_COLOURS = {"critical": "#b71c1c", "warning": "#e65100", "info": "#1565c0"}


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("profiler_service.exporters", "templates"),
        autoescape=select_autoescape(["html"]),
    )
    env.filters["bytes"] = _format_bytes
    return env


def render_report(
    snapshot: Snapshot, settings: Settings, comparison: tuple[Snapshot, Comparison] | None = None
) -> str:
    """`comparison` is (baseline, compare(baseline, snapshot)) for the side-by-side section."""
    template = _environment().get_template("report.html")
    return template.render(
        s=snapshot,
        summary=snapshot.summary,
        links=snapshot_links(snapshot, settings),
        baseline=comparison[0] if comparison else None,
        comparison=comparison[1] if comparison else None,
        charts=charts,
        step_parts=charts.STEP_PARTS,
        category_colours=charts.CATEGORY_COLOURS,
        severity_colours=SEVERITY_COLOURS,
    )


def _format_bytes(value: int | None) -> str:
    if value is None:
        return "n/a"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} GiB"
