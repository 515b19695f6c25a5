"""Server-side SVG charts for the report: they draw offline, with no script or CDN (the fleet
page's: fleet_charts.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

from profiler_service.analysis.models import AllocatorMemory, GpuActivity, HostActivity, StepTime
from profiler_service.analysis.renamed_fields import percent
from profiler_service.lookback.models import Series

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
    ("between_steps_ms", "Between steps", "#c7c7c7"),
)
CATEGORY_COLOURS = {
    "compute": "#2ca02c",
    "memory": "#ff7f0e",
    "communication": "#e377c2",
    "input": "#d62728",
    "other": "#7f7f7f",
}
MAX_BARS = 120
# The host lane's colours: input red as in the step chart, TF ops blue, Python purple.
_HOST_COLOURS = {
    HostActivity.INPUT: "#d62728",
    HostActivity.TRANSFER: "#ff7f0e",
    HostActivity.TF_OPS: "#1f77b4",
    HostActivity.PYTHON: "#9467bd",
    HostActivity.TF_DATA: "#ff9896",
    HostActivity.NOTHING: "#eeeeee",
}
HOST_ACTIVITY_COLOURS = {act: (colour, act.label) for act, colour in _HOST_COLOURS.items()}
GPU_BUSY_COLOUR = "#2ca02c"


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


def step_chart_caption(step_time: StepTime) -> str:
    """What the step chart's bars are, beside the step count above it, where the two differ:
    the count is the training steps run while captured; a bar is a step XProf timed whole (it
    sets the first and last aside, the capture's edges cut a step each; under
    `steps_per_execution` a bar is one call of N steps; the chart keeps the last MAX_BARS)."""
    bars = len(step_time.steps[-MAX_BARS:])
    if not bars:
        return ""
    per = step_time.steps_per_marker
    timed = max(step_time.markers, len(step_time.steps))
    if bars * per == step_time.count and per == 1:
        return ""  # one bar a step, every step: nothing to explain
    unit = "step" if per == 1 else f"call of {per} training steps (times per training step)"
    text = f"{bars} bar{'s' if bars != 1 else ''}, one per {unit} XProf timed whole"
    if bars < timed:
        text += f" (the last {bars} of the {timed} it timed)"
    edges = step_time.count - timed * per
    if edges > 0:
        text += f"; {edges} more ran at the capture's start and end, partly outside it"
    return text


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


def gpu_lanes_svg(gpu: GpuActivity, width: int = 900, lane: int = 22) -> Markup:
    """One lane per GPU (green as dark as the slice was busy) and one per host (what it did
    most in each slice), over the same slices of the capture."""
    if not gpu.devices or not gpu.slices:
        return Markup("")
    label_w, gap = 150, 4
    cell = (width - label_w) / gpu.slices
    rows = []
    lanes: list[tuple[str, list[str]]] = []
    for device in gpu.devices:
        cells = []
        for i, busy in enumerate(device.busy_timeline_share):
            cells.append(
                f'<rect x="{label_w + i * cell:.2f}" width="{cell:.2f}" height="{lane}" '
                f'fill="{GPU_BUSY_COLOUR}" fill-opacity="{max(busy, 0):.2f}">'
                f"<title>{escape(device.device)}: busy {percent(busy):g}%</title></rect>"
            )
        lanes.append((device.device.removeprefix("/device:"), cells))
    for host in gpu.hosts:
        cells = []
        for i, act in enumerate(host.activity):
            colour, label = HOST_ACTIVITY_COLOURS[act]
            cells.append(
                f'<rect x="{label_w + i * cell:.2f}" width="{cell:.2f}" height="{lane}" '
                f'fill="{colour}"><title>host: {label}</title></rect>'
            )
        lanes.append((f"host {host.host}".strip(), cells))
    for row, (label, cells) in enumerate(lanes):
        y = row * (lane + gap)
        rows.append(
            f'<g class="lane" transform="translate(0 {y})"><text x="0" y="{lane - 6}" '
            f'font-size="12">{escape(label)}</text>'
            f'<rect x="{label_w}" width="{width - label_w}" height="{lane}" fill="none" '
            f'stroke="#ccc"/>{"".join(cells)}</g>'
        )
    height = len(lanes) * (lane + gap)
    return Markup(
        f'<svg class="chart" id="gpu-lanes" viewBox="0 0 {width} {height}" width="100%" '
        f'height="{height}" role="img" preserveAspectRatio="none" '
        f'aria-label="GPU busy and host activity over the capture">{"".join(rows)}</svg>'
    )


def format_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} GiB"


# A capacity line is drawn when it is at most this far above the highest point used; beyond,
# drawing it would flatten the data into the bottom of the chart, so it becomes a note.
CAPACITY_FITS_RATIO = 1.5
_PAD = 14  # room for the axis labels, in chart units


@dataclass(frozen=True)
class _YScale:
    """Values to chart units, the highest at the top, `_PAD` free above and below."""

    low: float
    high: float
    height: int

    def __call__(self, value: float) -> float:
        return _PAD + (self.high - value) / (self.high - self.low) * (self.height - 2 * _PAD)


def _y_scale(
    values: list[float], capacity: float | None, height: int, floor_at_zero: bool
) -> tuple[_YScale, bool]:
    """A scale over what was drawn, and whether `capacity` fits on it (else it is a note)."""
    top = max(values)
    fits = bool(capacity) and capacity <= top * CAPACITY_FITS_RATIO
    low, high = min(values), max(top, capacity) if fits else top
    pad = (high - low) * 0.05 or abs(high) * 0.05 or 1.0
    low, high = low - pad, high + pad
    return _YScale(max(0.0, low) if floor_at_zero else low, high, height), fits


def _capacity_marks(
    capacity: float | None, fits: bool, y: _YScale, width: int, drawn_max: float
) -> tuple[str, str]:
    """(the capacity line for the SVG, or the note below it when off the scale)."""
    if not capacity:
        return "", ""
    if fits:
        return (
            f'<line class="capacity" x1="0" x2="{width}" y1="{y(capacity):.1f}" '
            f'y2="{y(capacity):.1f}" stroke="#d62728" stroke-dasharray="4 3"/>'
            f'<text x="{width - 4}" y="{y(capacity) - 3:.1f}" font-size="11" text-anchor="end" '
            f'fill="#d62728">capacity {format_bytes(capacity)}</text>'
        ), ""
    return "", (
        f'<p class="capacity-note none">Capacity {format_bytes(capacity)} is off the scale '
        f"({capacity / max(drawn_max, 1):,.0f}x the highest point drawn).</p>"
    )


def memory_svg(memory: AllocatorMemory, width: int = 900, height: int = 180) -> Markup:
    """Memory in use, scaled to what was used; each step's low point and its fitted growth."""
    points = memory.timeline
    if len(points) < 2:
        return Markup("")
    used = [p.bytes_in_use for p in points] + [p.bytes_in_use for p in memory.step_floors]
    y, capacity_fits = _y_scale(used, memory.capacity_bytes, height, floor_at_zero=True)
    capacity_line, note = _capacity_marks(memory.capacity_bytes, capacity_fits, y, width, max(used))
    t0 = points[0].time_ms
    span = (points[-1].time_ms - t0) or 1.0

    def x(time_ms: float) -> float:
        return (time_ms - t0) / span * width

    coords = " ".join(f"{x(p.time_ms):.1f},{y(p.bytes_in_use):.1f}" for p in points)
    parts = [
        f'<polyline class="line" fill="none" stroke="#1f77b4" stroke-width="1.5" '
        f'points="{coords}"/>'
    ]
    parts += [
        f'<circle class="step-floor" cx="{x(p.time_ms):.1f}" cy="{y(p.bytes_in_use):.1f}" r="2" '
        f'fill="#ff7f0e"><title>step low point {format_bytes(p.bytes_in_use)}</title></circle>'
        for p in memory.step_floors
    ]
    growth = memory.growth
    if growth is not None and memory.step_floors and growth.bytes_per_s:
        first, last = memory.step_floors[0], memory.step_floors[-1]
        mid_t = (first.time_ms + last.time_ms) / 2
        mid_b = sum(p.bytes_in_use for p in memory.step_floors) / len(memory.step_floors)
        ends = [
            (t, mid_b + growth.bytes_per_s * (t - mid_t) / 1000)
            for t in (first.time_ms, last.time_ms)
        ]
        parts.append(
            f'<line class="growth-line" x1="{x(ends[0][0]):.1f}" y1="{y(ends[0][1]):.1f}" '
            f'x2="{x(ends[1][0]):.1f}" y2="{y(ends[1][1]):.1f}" stroke="#ff7f0e" '
            f'stroke-dasharray="6 3"><title>growth {format_bytes(growth.bytes_per_s)}/s'
            "</title></line>"
        )
    parts.append(
        f'{capacity_line}<text x="4" y="11" font-size="11">{format_bytes(y.high)}</text>'
        f'<text x="4" y="{height - 3}" font-size="11">{format_bytes(y.low)}</text>'
        f'<text x="{width - 4}" y="{height - 3}" font-size="11" text-anchor="end">'
        f"{span:,.0f} ms</text>"
    )
    return Markup(
        f'<svg class="chart memory-chart" viewBox="0 0 {width} {height}" width="100%" '
        f'height="{height}" role="img" preserveAspectRatio="none" '
        f'aria-label="memory in use over time">{"".join(parts)}</svg>{note}'
    )


LEAD_UP_COLOURS = {"prometheus": "#6a3d9a"}


# In-use readings and the capacity each is drawn against (lookback/ring.py names).
LEAD_UP_CAPACITY = {
    "memory_in_use_bytes": "memory_capacity_bytes",
    "gpu_memory_used_bytes": "gpu_memory_total_bytes",
}


def lead_up_svg(
    series: Series,
    start: datetime,
    end: datetime,
    marks: dict[str, datetime | tuple[datetime, datetime]],
    capacity: Series | None = None,
    width: int = 900,
    height: int = 90,
) -> Markup:
    """One lead-up series over the whole window, with the trigger, the alert's start and the
    capture window marked at the same x positions on every chart of the report; memory with
    its capacity as a line when that fits the scale, else as a note."""
    if not series.points:
        return Markup("")
    t0, t1 = start.timestamp(), end.timestamp()
    span = (t1 - t0) or 1.0
    values = [v for _, v in series.points]
    limit = capacity.points[-1][1] if capacity is not None and capacity.points else None
    non_negative = series.unit in ("bytes", "ms", "count", "ratio") and min(values) >= 0
    y, limit_fits = _y_scale(values, limit, height, floor_at_zero=non_negative)
    capacity_line, note = _capacity_marks(limit, limit_fits, y, width, max(values))

    def x(t: float) -> float:
        return min(width, max(0.0, (t - t0) / span * width))

    parts = []
    for name, when in marks.items():
        css = "mark-" + "-".join(name.split())
        if isinstance(when, tuple):
            x0, x1 = x(when[0].timestamp()), x(when[1].timestamp())
            parts.append(
                f'<rect class="mark {css}" x="{x0:.1f}" y="0" width="{max(x1 - x0, 2):.1f}" '
                f'height="{height}" fill="#ffe082" opacity="0.6">'
                f"<title>{escape(name)}</title></rect>"
            )
        else:
            xm = x(when.timestamp())
            parts.append(
                f'<line class="mark {css}" x1="{xm:.1f}" x2="{xm:.1f}" y1="0" y2="{height}" '
                f'stroke="#d62728" stroke-dasharray="3 2"><title>{escape(name)} '
                f"{when:%H:%M:%S}</title></line>"
            )
    parts.append(capacity_line)
    coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in series.points)
    colour = LEAD_UP_COLOURS.get(series.source, "#1f77b4")
    parts.append(
        f'<polyline class="line" fill="none" stroke="{colour}" stroke-width="1.5" '
        f'points="{coords}"/>'
    )
    if len(series.points) == 1:
        t, v = series.points[0]
        parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}"/>')
    parts.append(
        f'<text x="4" y="11" font-size="11">{escape(_format_value(y.high, series.unit))}</text>'
        f'<text x="4" y="{height - 3}" font-size="11">'
        f"{escape(_format_value(y.low, series.unit))}</text>"
    )
    title = lead_up_title(series)
    return Markup(
        f'<svg class="chart lead-up-chart" data-series="{escape(series.name)}" '
        f'viewBox="0 0 {width} {height}" width="100%" height="{height}" role="img" '
        f'preserveAspectRatio="none" aria-label="{escape(title)}">{"".join(parts)}</svg>{note}'
    )


def lead_up_title(series: Series) -> str:
    labels = ", ".join(f"{k}={v}" for k, v in sorted(series.labels.items()))
    return f"{series.name}{f' {{{labels}}}' if labels else ''} · {series.source}"


def _format_value(value: float, unit: str) -> str:
    if unit == "bytes":
        return format_bytes(value)
    if unit == "ms":
        return f"{value:,.1f} ms"
    if unit == "ratio":
        return f"{100 * value:.0f}%"
    return f"{value:,.3g}"
