"""The Grafana annotation of a snapshot names the finding to fix first and what it saves."""

from __future__ import annotations

from profiler_service.analysis.findings import estimate
from profiler_service.analysis.models import Finding, ProcessCpu, Severity, StepTime, Summary
from profiler_service.exporters.grafana import annotation_for
from profiler_service.models import CaptureOptions, Snapshot, SnapshotStatus


def test_the_annotation_names_the_fix_that_saves_most_first():
    summary = Summary(
        step_time=StepTime(count=20, avg_ms=100.0),
        process_cpu=ProcessCpu(cores_available=2, source="agent"),
    )
    findings = [
        Finding(rule="memory_growth", severity=Severity.CRITICAL, title="Memory grows"),
        Finding(
            rule="input_bound",
            severity=Severity.WARNING,
            title="Input-bound: 60% waiting",
            evidence={"input_share": 0.6},
        ),
    ]
    for f in findings:
        f.impact = estimate(f, summary)
    snapshot = Snapshot(
        id="20261205-120000-trainer-abc123",
        status=SnapshotStatus.READY,
        target="trainer",
        capture=CaptureOptions(
            duration_ms=3000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        summary=summary,
        findings=findings,
    )
    body = annotation_for(snapshot, "https://profiler.example")
    assert "finding:input_bound" in body["tags"]  # a warning that saves 50 % before a critical
    low, high = findings[1].impact.saving_range  # the point with the calibrated spread
    assert (
        "Input-bound: 60% waiting; fix this first, it saves about 50% of step time "
        f"({low:.0%}-{high:.0%}): 100.0 -> 50.0 ms" in body["text"]
    )
