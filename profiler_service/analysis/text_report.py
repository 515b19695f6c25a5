"""Plain-text rendering of a snapshot's verdict and findings, for the command line."""

from __future__ import annotations

import textwrap

from profiler_service.analysis.models import Finding, Summary
from profiler_service.models import Snapshot

_MARK = {"critical": "CRITICAL", "warning": "WARNING ", "info": "INFO    "}


def format_summary(summary: Summary) -> list[str]:
    lines = []
    st = summary.step_time
    if st.count:
        lines.append(
            f"{st.count} steps, step time avg {st.avg_ms} ms (min {st.min_ms}, max {st.max_ms}); "
            f"XProf's bottleneck: {summary.bottleneck}"
        )
    if summary.input_pipeline.conclusion:
        lines.append(f"XProf: {summary.input_pipeline.conclusion}")
    return lines


def format_findings(findings: list[Finding], width: int = 100) -> list[str]:
    if not findings:
        return ["no findings: nothing crossed a rule's threshold"]
    lines = []
    for f in findings:
        lines.append(f"{_MARK[f.severity.value]} {f.rule:<22} {f.title}")
        lines += textwrap.wrap(
            f.recommendation, width, initial_indent=" " * 33, subsequent_indent=" " * 33
        )
    return lines


def format_snapshot(snapshot: Snapshot) -> str:
    lines = [f"snapshot {snapshot.id}: {snapshot.status}"]
    if snapshot.error:
        lines.append(f"  error: {snapshot.error.code}: {snapshot.error.detail}")
    if snapshot.summary:
        lines += ["  " + line for line in format_summary(snapshot.summary)]
        lines += ["  " + line for line in format_findings(snapshot.findings)]
    return "\n".join(lines)
