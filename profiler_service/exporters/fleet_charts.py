"""Server-side SVG charts for the hub's fleet page: a job's step time over the window, the
idle GPU-hours by cause (in the report's host-lane colours)."""

from __future__ import annotations

from datetime import datetime

from markupsafe import Markup, escape

from profiler_service.analysis.gpu_waste import IdleCause
from profiler_service.analysis.models import HostActivity
from profiler_service.exporters.charts import HOST_ACTIVITY_COLOURS

__all__ = ["IDLE_CAUSE_COLOURS", "idle_by_cause_svg", "sparkline_svg"]


def sparkline_svg(
    points: list[tuple[datetime, float]],
    start: datetime,
    end: datetime,
    width: int = 240,
    height: int = 40,
) -> Markup:
    """A line of values over [start, end] (the fleet page's step time over the last days)."""
    if not points:
        return Markup('<span class="none">no data</span>')
    span_s = max((end - start).total_seconds(), 1.0)
    top = max(v for _, v in points) or 1.0
    xy = [
        (
            round(2 + (width - 4) * max(0.0, (t - start).total_seconds()) / span_s, 1),
            round(height - 2 - (height - 4) * v / top, 1),
        )
        for t, v in points
    ]
    line = " ".join(f"{x},{y}" for x, y in xy)
    last_x, last_y = xy[-1]
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img"><title>{escape(f"{points[-1][1]:.1f} ms, max {top:.1f} ms")}</title>'
        f'<polyline fill="none" stroke="#1565c0" stroke-width="1.5" points="{line}"/>'
        f'<circle cx="{last_x}" cy="{last_y}" r="2.5" fill="#1565c0"/></svg>'
    )


# The ledger's idle causes, in the host lane's colours; hours no capture explains in grey.
IDLE_CAUSE_COLOURS = {
    IdleCause.INPUT: HOST_ACTIVITY_COLOURS[HostActivity.INPUT][0],
    IdleCause.PYTHON: HOST_ACTIVITY_COLOURS[HostActivity.PYTHON][0],
    IdleCause.LAUNCHES: HOST_ACTIVITY_COLOURS[HostActivity.TF_OPS][0],
    IdleCause.COPIES: HOST_ACTIVITY_COLOURS[HostActivity.TRANSFER][0],
    IdleCause.NOTHING_TRACED: "#bdbdbd",
    IdleCause.NO_CAPTURE: "#616161",
}


def idle_by_cause_svg(bars: list[tuple[str, dict[str, float]]], width: int = 900) -> Markup:
    """One stacked bar per (label, {cause: idle GPU-hours}), scaled to the largest total."""
    top = max((sum(causes.values()) for _, causes in bars), default=0.0)
    if top <= 0:
        return Markup("")
    row, label_w = 22, 180
    scale = (width - label_w - 90) / top
    parts = []
    for n, (label, causes) in enumerate(bars):
        y, x = n * row, float(label_w)
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" font-size="12">'
            f"{escape(label)}</text>"
        )
        for cause, colour in IDLE_CAUSE_COLOURS.items():
            hours = causes.get(cause, 0.0)
            if hours <= 0:
                continue
            w = hours * scale
            parts.append(
                f'<rect class="bar" data-cause="{cause}" x="{x:.2f}" y="{y + 2}" width="{w:.2f}" '
                f'height="{row - 4}" fill="{colour}"><title>{escape(label)}: {escape(cause)} '
                f"{hours:.1f} GPU-h</title></rect>"
            )
            x += w
        parts.append(
            f'<text x="{x + 6:.2f}" y="{y + 15}" font-size="12">'
            f"{sum(causes.values()):.1f} GPU-h</text>"
        )
    height = row * len(bars)
    return Markup(
        f'<svg class="chart" id="idle-by-cause" viewBox="0 0 {width} {height}" width="100%" '
        f'height="{height}" role="img" aria-label="idle GPU-hours by cause">{"".join(parts)}'
        "</svg>"
    )
