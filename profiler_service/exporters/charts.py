"""Server-side SVG charts for the report: they draw offline, with no script or CDN."""

from __future__ import annotations

from markupsafe import Markup, escape

from profiler_service.analysis.models import AllocatorMemory, StepTime

# Step-time parts, in stacking order, with the colours the legend shows.
STEP_PARTS = (
    ("input_ms", "Input", "#d62728"),
    ("host_compute_ms", "Host compute", "#1f77b4"),
    ("device_compute_ms", "Device compute", "#2ca02c"),
    ("kernel_launch_ms", "Kernel launch", "#9467bd"),
    ("device_to_device_ms", "Device to device", "#8c564b"),
    ("collectives_ms", "Collectives", "#e377c2"),
    ("compile_ms", "Compile", "#bcbd22"),
    ("output_ms", "Output", "#17becf"),
    ("other_ms", "All others", "#7f7f7f"),
)
CATEGORY_COLOURS = {
    "compute": "#2ca02c",
    "memory": "#ff7f0e",
    "communication": "#e377c2",
    "input": "#d62728",
    "other": "#7f7f7f",
}
MAX_BARS = 120


def step_breakdown_svg(step_time: StepTime, width: int = 900, height: int = 220) -> Markup:
    steps = step_time.steps[-MAX_BARS:]
    if not steps:
        return Markup("")
    top = max(s.step_time_ms for s in steps) or 1.0
    bar_w = width / len(steps)
    parts = []
    for i, step in enumerate(steps):
        y = float(height)
        for field, label, colour in STEP_PARTS:
            value = getattr(step.breakdown, field)
            if value <= 0:
                continue
            h = value / top * (height - 10)
            y -= h
            parts.append(
                f'<rect class="bar" x="{i * bar_w:.2f}" y="{y:.2f}" '
                f'width="{max(bar_w - 1, 0.5):.2f}" height="{h:.2f}" fill="{colour}">'
                f"<title>{escape(step.name)}: {label} {value:.2f} ms</title></rect>"
            )
    return Markup(
        f'<svg class="chart" id="step-chart" viewBox="0 0 {width} {height}" width="100%" '
        f'height="{height}" role="img" preserveAspectRatio="none" '
        'aria-label="step time breakdown per step">'
        f'{"".join(parts)}<text x="4" y="12" font-size="11">{top:.1f} ms</text></svg>'
    )


def category_svg(shares: dict[str, float], width: int = 900, height: int = 28) -> Markup:
    if not shares:
        return Markup("")
    x, rects = 0.0, []
    for category, value in sorted(shares.items(), key=lambda kv: -kv[1]):
        w = value * width
        rects.append(
            f'<rect class="bar" x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" '
            f'fill="{CATEGORY_COLOURS.get(category, "#aaa")}"><title>{escape(category)} '
            f"{value:.1%}</title></rect>"
        )
        x += w
    return Markup(
        f'<svg class="chart" id="category-chart" viewBox="0 0 {width} {height}" width="100%" '
        f'height="{height}" role="img" preserveAspectRatio="none" '
        f'aria-label="op time by category">{"".join(rects)}</svg>'
    )


def memory_svg(memory: AllocatorMemory, width: int = 900, height: int = 180) -> Markup:
    points = memory.timeline
    if len(points) < 2:
        return Markup("")
    top = max([p.bytes_in_use for p in points] + [memory.capacity_bytes or 0]) or 1
    span = (points[-1].time_ms - points[0].time_ms) or 1.0
    coords = " ".join(
        f"{(p.time_ms - points[0].time_ms) / span * width:.1f},"
        f"{height - p.bytes_in_use / top * (height - 10):.1f}"
        for p in points
    )
    capacity = ""
    if memory.capacity_bytes:
        y = height - memory.capacity_bytes / top * (height - 10)
        capacity = (
            f'<line x1="0" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d62728" '
            'stroke-dasharray="4 3"><title>capacity</title></line>'
        )
    return Markup(
        f'<svg class="chart memory-chart" viewBox="0 0 {width} {height}" width="100%" '
        f'height="{height}" role="img" preserveAspectRatio="none" '
        f'aria-label="memory in use over time">{capacity}'
        f'<polyline class="line" fill="none" stroke="#1f77b4" stroke-width="1.5" '
        f'points="{coords}"/></svg>'
    )
