"""Plain-text rendering of a snapshot's verdict and findings, for the command line."""

from __future__ import annotations

import textwrap

from profiler_service.across.compare import Comparison, GateMetric
from profiler_service.across.verification import headline
from profiler_service.analysis.gpu_models import describe_devices
from profiler_service.analysis.input_impact import ACTION_LABELS
from profiler_service.analysis.models import Finding, HostActivity, Summary
from profiler_service.analysis.readers.framework import Framework
from profiler_service.analysis.readers.memory_events import RECORDING_VARIABLE
from profiler_service.analysis.renamed_fields import percent
from profiler_service.models import CaptureCost, Snapshot

_MARK = {"critical": "CRITICAL", "warning": "WARNING ", "info": "INFO    "}


def framework_label(summary: Summary) -> str | None:
    """`Keras 3 on JAX`, or None where the capture says nothing (or predates the reading)."""
    if summary.framework is None or summary.framework == Framework.UNKNOWN:
        return None
    try:
        return Framework(summary.framework).label
    except ValueError:  # a newer analysis's value
        return summary.framework


def format_summary(summary: Summary) -> list[str]:
    lines = []
    if (label := framework_label(summary)) is not None:
        lines.append(f"the job runs {label}")
    st = summary.step_time
    if st.count:
        lines.append(
            f"{st.count} steps, step time avg {format_ms(st.avg_ms)} ms (min "
            f"{format_ms(st.min_ms)}, max {format_ms(st.max_ms)}); "
            f"XProf's bottleneck: {summary.bottleneck}"
        )
    if summary.input_pipeline.conclusion:
        lines.append(f"XProf: {summary.input_pipeline.conclusion}")
    gpu = summary.gpu
    if gpu is not None and gpu.active:
        idle = percent(gpu.idle_share or 0.0)
        meanwhile = ", ".join(
            f"{act.label} {percent(gpu.idle_while(act)):g}%"
            for act in HostActivity
            if percent(gpu.idle_while(act)) >= 1
        )
        lines.append(
            f"GPUs: {describe_devices(summary)}; idle {idle:g}% of the capture"
            + (f" (meanwhile the host: {meanwhile})" if meanwhile else "")
        )
    stacks = summary.python_stacks
    if stacks is not None and stacks.unavailable:
        lines += textwrap.wrap(
            f"Python stacks: none. {stacks.unavailable}", 100, subsequent_indent="  "
        )
    missing = summary.memory_unrecorded
    if missing is not None:  # one line with what to do; the why is in the snapshot and report
        lines.append(
            f"memory: no allocator events ({', '.join(missing.hosts)}). Set "
            f"{RECORDING_VARIABLE}=true in the job before TensorFlow is imported."
        )
    return lines


def format_ms(value: float | None) -> str:
    """Milliseconds to the precision that matters at their size: 41.0, 2.50, 0.123."""
    if value is None:
        return "-"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def format_findings(findings: list[Finding], width: int = 100) -> list[str]:
    if not findings:
        return ["no findings: nothing crossed a rule's threshold"]
    lines = []
    for i, f in enumerate(findings):
        lines.append(f"{_MARK[f.severity.value]} {f.rule:<22} {f.title}")
        saving = describe_saving(f)
        if saving:
            lines.append(" " * 33 + ("fix this first: " if i == 0 else "") + saving)
        lines += textwrap.wrap(
            f.recommendation, width, initial_indent=" " * 33, subsequent_indent=" " * 33
        )
    return lines


def describe_saving(finding: Finding) -> str:
    """`saves about 54% of step time (30-60%): 100 -> 46 ms`, `returns 75% of the GPUs the job
    holds` where the GPUs it frees ran nothing, or '' when nothing measurable."""
    impact = finding.impact
    if impact is not None and impact.saving_share <= 0 < impact.returned_gpu_share:
        return f"returns {impact.returned_gpu_share:.0%} of the GPUs the job holds (GPU-hours)"
    if impact is None or impact.saving_share <= 0:
        return ""
    text = f"saves about {impact.saving_share:.0%} of step time{_span(*impact.saving_range)}"
    if impact.step_ms_now and impact.step_ms_after is not None:
        text += f": {format_ms(impact.step_ms_now)} -> {format_ms(impact.step_ms_after)} ms"
    singles = [a for a in impact.actions if "+" not in a.action]
    if len(singles) > 1:
        text += " with every change; alone, " + ", ".join(
            f"{ACTION_LABELS.get(a.action, a.action)} "
            + (f"{a.saving_share:.0%}" if a.saving_share >= 0 else f"{-a.saving_share:.0%} slower")
            + _span(*a.saving_range)
            for a in sorted(singles, key=lambda a: -a.saving_share)
        )
    return text


def _span(low: float, high: float) -> str:
    """` (30%-60%)`; ` (25% slower to 22% saved)` where the step may get slower, ` (10%-40%
    slower)` where it will; '' for a range of no width."""
    if f"{low:.0%}" == f"{high:.0%}":
        return ""
    if high < 0:
        return f" ({-high:.0%}-{-low:.0%} slower)"
    if low < 0:
        return f" ({-low:.0%} slower to {high:.0%} saved)"
    return f" ({low:.0%}-{high:.0%})"


def describe_cost(cost: CaptureCost | None) -> str:
    """`the capture cost the job 4% of step time: 5.2 ms a step while traced, 5.0 ms before
    (400 and 2,000 steps)`, or why that is unknown."""
    if cost is None:
        return ""
    if cost.ratio is None:
        why = (cost.note or "").removeprefix("unknown: ")
        return f"what the capture cost the job: unknown ({why})"
    change = cost.ratio - 1
    verb = (
        f"cost the job {change:.0%} of step time"
        if change >= 0.005
        else "cost the job nothing measurable"
    )
    text = (
        f"the capture {verb}: {format_ms(cost.step_ms_during)} ms a step while traced, "
        f"{format_ms(cost.step_ms_before)} ms before"
    )
    if cost.steps_before:
        text += f" ({cost.steps_during:,} and {cost.steps_before:,} steps)"
    return text + (f"; {cost.note}" if cost.note else "")


def format_snapshot(snapshot: Snapshot) -> str:
    lines = [f"snapshot {snapshot.id}: {snapshot.status}"]
    if snapshot.capture.cost is not None:
        lines.append("  " + describe_cost(snapshot.capture.cost))
    if snapshot.verified_against:
        lines.append("  " + headline(snapshot.verified_against, snapshot.verification))
        if snapshot.step_change is not None and snapshot.step_change.note:
            lines.append(f"  ({snapshot.step_change.note})")
    if snapshot.error:
        lines.append(f"  error: {snapshot.error.code}: {snapshot.error.detail}")
    if snapshot.summary:
        lines += ["  " + line for line in format_summary(snapshot.summary)]
        lines += ["  " + line for line in format_findings(snapshot.findings)]
    return "\n".join(lines)


def format_comparison(
    comparison: Comparison, metric: GateMetric, max_regression: float
) -> list[str]:
    lines = [f"{'':<22}{'base':>14}{'head':>14}{'change':>10}"]
    rows = [(name, c, GateMetric(name).shown) for name, c in comparison.metrics.items()]
    rows += [
        (f"  {part.removesuffix('_ms')} ms", c, _as_is)
        for part, c in comparison.step_breakdown_ms.items()
    ]
    for name, c, shown in rows:
        if c.base is None and c.head is None:
            continue
        change = f"{100 * (c.ratio - 1):+.1f}%" if c.ratio is not None else "n/a"
        regressed = name == metric.value and comparison.is_regression(metric, max_regression)
        mark = " <-" if regressed else ""
        base, head = _num(shown(c.base)), _num(shown(c.head))
        lines.append(f"{name:<22}{base:>14}{head:>14}{change:>10}{mark}")
    for title, ops in (("grown", comparison.ops_grown), ("new", comparison.ops_new)):
        for op in ops[:5]:
            lines.append(
                f"op {title}: {op.name} ({_num(op.base_ms_per_step)} -> "
                f"{_num(op.head_ms_per_step)} ms/step)"
            )
    if comparison.findings_new:
        lines.append(f"new findings: {', '.join(comparison.findings_new)}")
    if comparison.findings_resolved:
        lines.append(f"resolved findings: {', '.join(comparison.findings_resolved)}")
    return lines + comparison.notes


def _as_is(value: float | None) -> float | None:
    return value


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"
