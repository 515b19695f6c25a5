"""The fleet ledger as text: what `profiler-service ledger` prints."""

from __future__ import annotations

from profiler_service.hub.ledger import JobLedger, Ledger

__all__ = ["format_ledger"]


def _h(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _between(bounds: tuple[float, float] | None, fmt=_h) -> str:
    """` (12.0-30.5)`: the least and the most, where they differ."""
    if bounds is None or fmt(bounds[0]) == fmt(bounds[1]):
        return ""
    return f" ({fmt(bounds[0])}-{fmt(bounds[1])})"


def _causes(job: JobLedger) -> str:
    if job.idle_gpu_hours:
        parts = sorted(job.idle_by_cause.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{c} {h / job.idle_gpu_hours:.0%}" for c, h in parts[:3])
    parts = sorted(job.idle_share_by_cause.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{c} {s:.0%}" for c, s in parts[:3])


def format_ledger(ledger: Ledger, top: int = 20) -> str:
    t = ledger.totals
    cost = f"cost {ledger.currency}" if ledger.currency else "cost"  # the columns' header
    lines = [f"GPU-hours over {ledger.window} ({ledger.source}), {t.jobs} jobs"]
    if t.gpu_hours is not None:
        idle = t.idle_gpu_hours or 0.0
        lines.append(
            f"  held {_h(t.gpu_hours)}, busy {_h(t.busy_gpu_hours)}, idle {_h(idle)} "
            f"({idle / t.gpu_hours:.0%}), recoverable {_h(t.recoverable_gpu_hours)}"
            f"{_between(t.recoverable_gpu_hours_range)}"
            if t.gpu_hours
            else "  no GPU-hours held"
        )
        if t.cost is not None:
            lines.append(
                f"  cost {_money(t.cost)} {ledger.currency or ''}, idle {_money(t.idle_cost)}, "
                f"recoverable {_money(t.recoverable_cost)}"
                f"{_between(t.recoverable_cost_range, _money)}"
            )
    lines.extend(f"  note: {note}" for note in ledger.notes)
    lines.append("")
    lines.append(
        f"{'namespace':<16} {'job':<24} {'GPUs':>4} {'GPU-h':>9} {'idle':>5} {'recov. GPU-h':>12} "
        f"{cost:>10}  idle by cause; fix this first"
    )
    for job in ledger.jobs[:top]:
        idle = "-" if job.idle_share is None else f"{job.idle_share:.0%}"
        recoverable = (
            _h(job.recoverable_gpu_hours)
            if job.recoverable_gpu_hours is not None
            else f"{job.recoverable_share or 0:.0%} of time"
        )
        first = ""
        if job.top_finding:
            f = job.top_finding
            span = ""
            if f.saving_range and f"{f.saving_range[0]:.0%}" != f"{f.saving_range[1]:.0%}":
                span = f", {f.saving_range[0]:.0%}-{f.saving_range[1]:.0%}"
            first = f"; {f.rule} (saves {f.saving_share:.0%}{span}) {f.link}"
        lines.append(
            f"{job.namespace or '':<16} {job.job:<24} {job.gpus:>4} {_h(job.gpu_hours):>9} "
            f"{idle:>5} {recoverable:>12} {_money(job.cost):>10}  {_causes(job)}{first}"
        )
    if len(ledger.jobs) > top:
        lines.append(f"... {len(ledger.jobs) - top} more (--top, or --json)")
    if ledger.namespaces:
        lines.append("")
        lines.append(f"{'namespace':<16} {'jobs':>5} {'GPU-h':>9} {'idle GPU-h':>10} "
                     f"{'recov. GPU-h':>12} {cost:>10}")  # fmt: skip
        for ns in ledger.namespaces:
            lines.append(
                f"{ns.namespace or '':<16} {ns.jobs:>5} {_h(ns.gpu_hours):>9} "
                f"{_h(ns.idle_gpu_hours):>10} {_h(ns.recoverable_gpu_hours):>12} "
                f"{_money(ns.cost):>10}"
            )
    return "\n".join(lines)
