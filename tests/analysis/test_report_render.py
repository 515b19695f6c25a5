"""The HTML report, rendered from synthetic snapshots: findings first, escaped values, charts."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from profiler_service.analysis.models import (
    AllocatorMemory,
    Finding,
    InputBound,
    InputOp,
    InputPipeline,
    MemoryPoint,
    OpCategory,
    Severity,
    StepBreakdown,
    StepSample,
    StepTime,
    Summary,
    TopOp,
    Utilisation,
)
from profiler_service.config import Settings
from profiler_service.exporters import charts
from profiler_service.exporters.charts import format_bytes
from profiler_service.exporters.report import _environment, render_report
from profiler_service.models import (
    CaptureOptions,
    Snapshot,
    SnapshotError,
    SnapshotFile,
    SnapshotStatus,
    Trigger,
    TriggerKind,
)

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
GIB = 1024**3


def sample(name: str, **parts: float) -> StepSample:
    return StepSample(name=name, step_time_ms=sum(parts.values()), breakdown=StepBreakdown(**parts))


STEPS = [
    sample("train 1", input_ms=90.0, host_compute_ms=8.0, other_ms=2.0),
    sample("train 2", input_ms=80.0, host_compute_ms=9.0),
    sample(f"train {XSS}", input_ms=85.0, host_compute_ms=7.0, compile_ms=5.0, other_ms=1.0),
]


def summary() -> Summary:
    return Summary(
        tools=["overview_page", "framework_op_stats", "input_pipeline_analyzer"],
        hosts=["worker-0"],
        bottleneck="input",
        step_time=StepTime(
            count=len(STEPS),
            avg_ms=95.0,
            min_ms=89.0,
            max_ms=100.0,
            stddev_ms=4.5,
            breakdown_avg=StepBreakdown(input_ms=85.0, host_compute_ms=8.0, other_ms=1.0),
            steps=STEPS,
        ),
        input_pipeline=InputPipeline(
            classification=InputBound.HIGHLY,
            input_share_pct=89.5,
            conclusion="Your program is HIGHLY input-bound because 89.5% of the total step time "
            "sampled is waiting for input.",
            slowest_stage="preprocessing",
            slowest_ops=[
                InputOp(
                    name=f"Iterator::Map{XSS}",
                    category="Preprocessing",
                    count=3,
                    self_time_ms=250.0,
                    self_time_share=0.9,
                )
            ],
        ),
        utilisation=Utilisation(hardware_type="CPU_ONLY", device_type="CPU"),
        top_ops=[
            TopOp(
                name=f"model/{XSS}/MatMul",
                type="_MklMatMul",
                host_or_device="Host",
                category=OpCategory.COMPUTE,
                occurrences=30,
                self_time_ms=12.5,
                self_time_share=0.6,
            )
        ],
        op_category_share={"compute": 0.6, "input": 0.4},
        memory=[
            AllocatorMemory(
                allocator="GPU_0_bfc",
                peak_bytes_in_use=8 * GIB,
                capacity_bytes=10 * GIB,
                peak_share_of_capacity=0.8,
                fragmentation_share=0.4,
                timeline=[
                    MemoryPoint(time_ms=0.0, bytes_in_use=GIB),
                    MemoryPoint(time_ms=5.0, bytes_in_use=8 * GIB),
                ],
            )
        ],
        notes=["kernel_stats: not on CPU"],
    )


FINDINGS = [
    Finding(
        rule="input_bound",
        severity=Severity.CRITICAL,
        title=f"Your input pipeline is the bottleneck {XSS}",
        evidence={"input_share_pct": 89.5, "stage_time_us": {"preprocessing": 1.0}},
        recommendation="parallelise the map",
        docs="https://www.tensorflow.org/guide/data_performance",
        impact_share=0.895,
    ),
    Finding(
        rule="short_capture",
        severity=Severity.INFO,
        title="Only 3 steps were captured",
        evidence={"steps": 3, "step_time_ms_avg": None},
        recommendation="Capture for longer.",
    ),
]


def snapshot(**fields) -> Snapshot:
    base = {
        "id": "20260105-120000-default-abc123",
        "status": SnapshotStatus.READY,
        "target": "default",
        "trigger": Trigger(
            kind=TriggerKind.WEBHOOK,
            source="HighStepTime",
            labels={"alertname": XSS, "pod": "trainer-0"},
            annotations={"summary": XSS},
        ),
        "capture": CaptureOptions(
            duration_ms=2000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        "created_at": datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
        "files": [SnapshotFile(name="worker-0.xplane.pb", size_bytes=1234)],
        "summary": summary(),
        "findings": FINDINGS,
    }
    base.update(fields)
    return Snapshot(**base)


@pytest.fixture
def settings() -> Settings:
    return Settings(tensorboard_url="http://xprof:8791")


def step_chart(html: str) -> str:
    match = re.search(r'<svg class="chart" id="step-chart".*?</svg>', html, re.S)
    assert match, "no step chart in the report"
    return match.group(0)


def test_ready_report_puts_findings_before_the_evidence(settings):
    html = render_report(snapshot(), settings)
    findings = html.index('<section id="findings">')
    first = html.index('data-rule="input_bound"')
    second = html.index('data-rule="short_capture"')
    step_heading = html.index("<h2>Step time</h2>")
    assert findings < first < second < step_heading
    assert 'class="status ready"' in html
    assert "No findings" not in html
    # Evidence lists plain values, not the nested dicts or the unknowns.
    assert "input_share_pct <code>89.5</code>" in html
    assert "stage_time_us" not in html
    assert "step_time_ms_avg" not in html
    assert 'href="http://xprof:8791/?run=20260105-120000-default-abc123' in html


def test_step_chart_has_one_bar_per_nonzero_step_part(settings):
    chart = step_chart(render_report(snapshot(), settings))
    parts = sum(
        1 for s in STEPS for field, _, _ in charts.STEP_PARTS if getattr(s.breakdown, field) > 0
    )
    assert parts == 9
    assert chart.count('<rect class="bar"') == parts
    assert chart.count("<title>") == parts


def test_report_escapes_values_from_the_capture_and_the_trigger(settings):
    html = render_report(snapshot(), settings)
    assert "<script>" not in html
    # Op name, input op, finding title, step name (inside the SVG), label and annotation.
    assert html.count(ESCAPED) >= 6
    assert f"model/{ESCAPED}/MatMul" in html
    assert f"alertname={ESCAPED}" in html
    assert f"train {ESCAPED}: Input" in step_chart(html)


def test_report_shows_memory_with_the_bytes_filter(settings):
    html = render_report(snapshot(), settings)
    assert "peak 8.0 GiB of 10.0 GiB (80%)" in html
    assert "fragmentation 40%" in html
    assert 'class="chart memory-chart"' in html


def test_failed_report_shows_the_error_and_no_analysis(settings):
    failed = snapshot(
        status=SnapshotStatus.FAILED,
        summary=None,
        findings=[],
        error=SnapshotError(code="capture_failed", detail=f"no profiler at {XSS}"),
    )
    html = render_report(failed, settings)
    assert 'class="status failed"' in html
    assert 'id="error"' in html
    assert "capture_failed" in html
    assert f"no profiler at {ESCAPED}" in html
    assert "<script>" not in html
    assert "No analysis for this snapshot." in html
    assert "<h2>Step time</h2>" not in html
    assert "step-chart" not in html
    assert "Open this run in TensorBoard" not in html  # only ready snapshots link there
    assert html.index('id="error"') < html.index('<section id="findings">')


def test_report_without_findings_says_so(settings):
    html = render_report(snapshot(findings=[]), settings)
    assert "No findings: nothing crossed a rule's threshold." in html


def test_report_without_step_markers_draws_no_chart(settings):
    empty = summary()
    empty.step_time = StepTime()
    html = render_report(snapshot(summary=empty), settings)
    assert "No step markers in this capture" in html
    assert "step-chart" not in html


def test_step_chart_caps_bars_at_max_bars_keeping_the_latest():
    n = charts.MAX_BARS + 30
    st = StepTime(
        count=n,
        steps=[sample(f"train {i}", input_ms=1.0 + i) for i in range(n)],
    )
    svg = str(charts.step_breakdown_svg(st))
    assert svg.count('<rect class="bar"') == charts.MAX_BARS
    assert "<title>train 30: " in svg
    assert "<title>train 29: " not in svg
    assert f"<title>train {n - 1}: " in svg


def test_step_chart_of_no_steps_is_empty():
    assert str(charts.step_breakdown_svg(StepTime())) == ""


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "n/a"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 * 1024**2, "5.0 MiB"),
        (8 * GIB, "8.0 GiB"),
        (2048 * GIB, "2048.0 GiB"),  # GiB is the largest unit
    ],
)
def test_bytes_filter(value, text):
    assert format_bytes(value) == text
    assert _environment().filters["bytes"](value) == text
