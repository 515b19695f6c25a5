"""The human report page: findings first, then the evidence, then links to dig deeper."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache

from jinja2 import Environment, PackageLoader, select_autoescape

from profiler_service.across.compare import Comparison, GateMetric
from profiler_service.across.verification import headline
from profiler_service.analysis.models import Finding
from profiler_service.analysis.renamed_fields import percent
from profiler_service.config import ReportSettings
from profiler_service.exporters import charts
from profiler_service.exporters.flame_graph import USER_COLOUR, flame_graph_svg
from profiler_service.exporters.links import snapshot_links
from profiler_service.exporters.text_report import (
    describe_cost,
    describe_saving,
    format_ms,
    framework_label,
)
from profiler_service.models import Snapshot

SEVERITY_COLOURS = {"critical": "#b71c1c", "warning": "#e65100", "info": "#1565c0"}


@cache
def templates() -> Environment:
    """The pages' templates (the report's and the hub's fleet page), with the filters and the
    helpers they share."""
    env = Environment(
        loader=PackageLoader("profiler_service.exporters", "templates"),
        autoescape=select_autoescape(["html"]),
    )
    env.filters["bytes"] = charts.format_bytes
    env.filters["ms"] = format_ms
    env.filters["percent"] = _percent
    env.globals["metric_shown"] = lambda name, value: GateMetric(name).shown(value)
    env.globals["describe_saving"] = describe_saving
    env.globals["verification_headline"] = headline
    env.globals["describe_cost"] = describe_cost
    env.globals["framework_label"] = framework_label
    env.globals["evidence_items"] = evidence_items
    return env


def evidence_items(finding: Finding) -> list[tuple[str, str, str]]:
    """A finding's evidence as a person reads it: (label, value, what it is), its own words for
    what a Python value would print raw (`[]`, `False`, `0.123456`); tables (lists of
    mappings) and nested mappings are left to the JSON."""
    # The evidence's models live beside their rules: the hub, which runs no rule, loads them
    # when it first renders a finding, not when it starts (tests/test_import_cycles.py).
    from profiler_service.analysis.findings import evidence_model

    model = evidence_model(finding.rule)
    fields = model.model_fields if model is not None else {}
    items = []
    for key, value in finding.evidence.items():
        if value is None or isinstance(value, dict):
            continue
        if isinstance(value, list) and value and isinstance(value[0], dict):
            continue
        about = fields[key].description or "" if key in fields else ""
        items.append((key.replace("_", " "), _evidence_value(value), about))
    return items


def _percent(share: float | None) -> float | None:
    """A share as the percentage the page shows; None (not measured) stays empty."""
    return None if share is None else percent(share)


def _evidence_value(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_evidence_value(v) for v in value) if value else "none"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_report(
    snapshot: Snapshot,
    settings: ReportSettings,
    comparison: tuple[Snapshot, Comparison] | None = None,
    python_stacks: tuple[str, list[str]] | None = None,
) -> str:
    """`comparison` is (baseline, compare(baseline, snapshot)) for the side-by-side section;
    `python_stacks` the snapshot's collapsed stacks and its Python's library roots, for the
    flame graph."""
    template = templates().get_template("report.html")
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
        lead_up_marks=lead_up_marks(snapshot),
        lead_up=lead_up_charts(snapshot),
        flame_graph=flame_graph_svg(*python_stacks) if python_stacks else None,
        flame_colour=USER_COLOUR,
    )


def lead_up_charts(snapshot: Snapshot) -> dict | None:
    """The lead-up's charts: each reading with its capacity beside it, over the time that has
    data or marks (a sampler that started a minute ago leaves most of its window empty)."""
    lead_up = snapshot.lead_up
    if lead_up is None:
        return None
    by_key = {(s.name, s.source, tuple(sorted(s.labels.items()))): s for s in lead_up.series}
    capacities = set(charts.LEAD_UP_CAPACITY.values())
    drawn = []
    for (name, source, labels), series in by_key.items():
        if name in capacities:
            continue
        capacity_name = charts.LEAD_UP_CAPACITY.get(name)
        drawn.append((series, by_key.get((capacity_name, source, labels))))
    first = [datetime.fromtimestamp(s.points[0][0], UTC) for s in lead_up.series if s.points]
    marks = lead_up_marks(snapshot).values()
    first += [m[0] if isinstance(m, tuple) else m for m in marks]
    return {"start": max(lead_up.start, min(first)), "end": lead_up.end, "charts": drawn}


def lead_up_marks(snapshot: Snapshot) -> dict:
    """When the alert started, when the capture was asked for, and the capture window."""
    marks: dict = {}
    if snapshot.trigger.starts_at is not None:
        marks["alert started"] = snapshot.trigger.starts_at
    marks["triggered"] = snapshot.created_at
    if snapshot.capture_started_at is not None:
        traced_from = snapshot.capture_started_at - timedelta(
            milliseconds=snapshot.capture.lookback_ms
        )
        marks["capture"] = (traced_from, snapshot.capture_finished_at or traced_from)
    return marks
