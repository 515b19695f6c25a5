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
    KeptAllocation,
    MemoryGrowth,
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
from profiler_service.analysis.readers import memory_events
from profiler_service.config import ReportSettings
from profiler_service.exporters import charts
from profiler_service.exporters.charts import format_bytes
from profiler_service.exporters.report import render_report, templates
from profiler_service.exporters.text_report import format_findings, format_summary
from profiler_service.lookback.models import LeadUp, Series
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
            input_share=0.895,
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
        evidence={"input_share": 0.895, "stage_time_us": {"preprocessing": 1.0}},
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
def settings() -> ReportSettings:
    return ReportSettings(tensorboard_url="http://xprof:8791")


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
    assert "input share</span> <code>0.895</code>" in html
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


def test_a_capture_without_memory_events_says_why_in_the_report_and_the_cli(settings):
    missing = memory_events.unrecorded(["worker-0"], on_gpu=False)
    bare = summary().model_copy(update={"memory": [], "memory_unrecorded": missing})
    html = render_report(snapshot(summary=bare), settings)
    card = html[html.index('id="memory-unrecorded"') :]
    assert "No memory events</b> from worker-0" in card
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in card and "before TensorFlow is imported" in card
    assert "AVX-512" in card and "0.91-1.02x" in card
    assert "XProf found no allocator activity" not in html  # the reason replaces the shrug
    cli = "\n".join(format_summary(bare))
    assert "memory: no allocator events (worker-0)." in cli
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in cli
    on_gpu = memory_events.unrecorded(["host"], on_gpu=True)
    assert "GPU" in on_gpu.why and "tracer level" in on_gpu.why


def test_the_first_finding_is_fix_this_first_with_its_saving_in_the_report_and_the_cli(
    settings,
):
    ranked = evaluate_impacts(FINDINGS, summary())
    html = render_report(snapshot(findings=ranked), settings)
    first = html[html.index('data-rule="input_bound"') :]
    assert "<b>Fix this first</b>: saves about" in first[: first.index("</div>")]
    assert html.count("Fix this first") == 1
    cli = "\n".join(format_findings(ranked))
    assert "fix this first: saves about" in cli and "->" in cli


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
    assert templates().filters["bytes"](value) == text


# --- memory chart and lead-up ---------------------------------------------------------------


def leaking(capacity: int | None) -> AllocatorMemory:
    """500 MiB growing 10 MiB per step over 10 steps, each with a 64 MiB sawtooth on top."""
    mib = 2**20
    timeline, floors = [], []
    for step in range(10):
        floor = 500 * mib + step * 10 * mib
        floors.append(MemoryPoint(time_ms=step * 100.0, bytes_in_use=floor))
        timeline += [
            MemoryPoint(time_ms=step * 100.0, bytes_in_use=floor),
            MemoryPoint(time_ms=step * 100.0 + 50, bytes_in_use=floor + 64 * mib),
        ]
    return AllocatorMemory(
        allocator="mklcpu",
        peak_bytes_in_use=654 * mib,
        capacity_bytes=capacity,
        timeline=timeline,
        step_floors=floors,
        growth=MemoryGrowth(
            basis="steps", points=10, steps=10, bytes_per_step=10 * mib, bytes_per_s=100 * mib,
            r2=1.0, rising_share=1.0, first_half_bytes_per_s=100 * mib,
            second_half_bytes_per_s=100 * mib, growth_bytes=90 * mib,
        ),
    )  # fmt: skip


def y_of(svg: str, pattern: str) -> list[float]:
    return [float(v) for v in re.findall(pattern, svg)]


def test_memory_chart_is_scaled_to_what_was_used_with_capacity_as_a_note_off_scale():
    svg = str(charts.memory_svg(leaking(capacity=24 * GIB)))
    # The axis spans the data (about 500-650 MiB), not 0-24 GiB: the rise fills the chart.
    labels = re.findall(r">([\d.]+ MiB)</text>", svg)
    assert len(labels) == 2 and all(400 < float(v.split()[0]) < 700 for v in labels), labels
    ys = [float(p.split(",")[1]) for p in re.search(r'points="([^"]+)"', svg)[1].split()]
    assert max(ys) - min(ys) > 100  # of a 180-unit chart
    assert 'class="capacity"' not in svg
    assert "Capacity 24.0 GiB is off the scale" in svg
    # Each step's low point, and the fitted growth through them.
    assert svg.count('class="step-floor"') == 10
    line = re.search(
        r'class="growth-line" x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" y2="([\d.]+)"', svg
    )
    assert float(line[2]) > float(line[4])  # rising: y shrinks upward


def test_memory_chart_draws_capacity_as_a_labelled_line_when_it_fits():
    svg = str(charts.memory_svg(leaking(capacity=800 * 2**20)))
    assert 'class="capacity"' in svg and "capacity 800.0 MiB" in svg
    assert "off the scale" not in svg


def test_lead_up_charts_mark_the_alert_the_trigger_and_the_capture_on_one_time_axis(settings):
    t0 = datetime(2026, 1, 5, 11, 55, tzinfo=UTC).timestamp()
    step_time = Series(
        name="step_time_ms", unit="ms", source="agent",
        points=[(t0 + i, 70.0 if i < 60 else 210.0) for i in range(290)],
    )  # fmt: skip
    memory = Series(
        name="memory_in_use_bytes", unit="bytes", source="agent", labels={"device": "host"},
        points=[(t0 + i, 2 * GIB + i * 2**20) for i in range(290)],
    )  # fmt: skip
    capacity = Series(
        name="memory_capacity_bytes", unit="bytes", source="agent", labels={"device": "host"},
        points=[(t0 + i, 2.5 * GIB) for i in range(290)],
    )  # fmt: skip
    started = datetime(2026, 1, 5, 11, 59, 50, tzinfo=UTC)
    html = render_report(
        snapshot(
            trigger=Trigger(
                kind=TriggerKind.WEBHOOK, starts_at=datetime(2026, 1, 5, 11, 58, tzinfo=UTC)
            ),
            capture_started_at=started,
            capture_finished_at=datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC),
            lead_up=LeadUp(
                start=datetime(2026, 1, 5, 11, 55, tzinfo=UTC),
                end=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
                series=[step_time, memory, capacity],
                notes=["no Prometheus"],
            ),
        ),
        settings,
    )
    assert html.index('id="lead-up"') < html.index("<h2>Step time</h2>")
    charts_drawn = re.findall(r'<svg class="chart lead-up-chart".*?</svg>', html, re.S)
    assert len(charts_drawn) == 2  # capacity is drawn inside the memory chart, not apart
    memory_chart = next(c for c in charts_drawn if 'data-series="memory_in_use_bytes"' in c)
    assert 'class="capacity"' in memory_chart and "capacity 2.5 GiB" in memory_chart
    for chart in charts_drawn:
        alert_x = float(re.search(r'class="mark mark-alert-started" x1="([\d.]+)"', chart)[1])
        trigger_x = float(re.search(r'class="mark mark-triggered" x1="([\d.]+)"', chart)[1])
        capture_x = float(re.search(r'class="mark mark-capture" x="([\d.]+)"', chart)[1])
        assert alert_x == pytest.approx(900 * 3 / 5, abs=1)  # 11:58 on 11:55-12:00
        assert alert_x < capture_x <= trigger_x + 1
    assert "no Prometheus" in html


def test_memory_card_names_what_is_kept_and_the_evidence_line_stays_readable(settings):
    memory = leaking(capacity=None)
    memory.kept_allocations = [
        KeptAllocation(op_name="MatMul", shape="[512,256]", count=57, bytes=57 * 2**19,
                       first_time_ms=3.0)
    ]  # fmt: skip
    finding = Finding(
        rule="memory_growth", severity=Severity.WARNING, title="Memory grows",
        evidence={"bytes_per_s": 1.0, "kept_allocations": [{"op": "MatMul", "count": 57}]},
    )  # fmt: skip
    base = summary()
    base.memory = [memory]
    html = render_report(snapshot(summary=base, findings=[finding]), settings)
    kept = re.search(r'<table class="kept">.*?</table>', html, re.S)[0]
    assert "MatMul" in kept and "[512,256]" in kept and ">57<" in kept and "28.5 MiB" in kept
    evidence = re.search(
        r'data-rule="memory_growth".*?<div class="evidence">(.*?)</div>', html, re.S
    )[1]
    assert "bytes per s</span> <code>1</code>" in evidence
    assert "kept allocations" not in evidence
    assert "100.0 MiB/s, 10.0 MiB per step" in html


def test_report_shows_tf_functions_and_what_each_op_allocates_per_step(settings):
    from profiler_service.analysis.models import OpAllocations, TfFunctionCalls, TfFunctions

    base = summary()
    base.tf_functions = TfFunctions(
        host="worker-0",
        span_ms=2000.0,
        functions=[TfFunctionCalls(name=f"step{XSS}", calls=90, traces=88, tracing_ms=1899.5)],
    )
    base.memory[0].allocations_by_op = [
        OpAllocations(op_name="concat", shapes=["[32,1365,256]"], bytes_per_step=44 * 2**20,
                      count_per_step=1.0, peak_alive_bytes=44 * 2**20)
    ]  # fmt: skip
    html = render_report(snapshot(summary=base), settings)
    functions = re.search(r'<table id="tf-functions">.*?</table>', html, re.S)[0]
    assert ESCAPED in functions and ">88<" in functions and ">1899.5<" in functions
    by_op = re.search(r'<table class="by-op">.*?</table>', html, re.S)[0]
    assert "concat" in by_op and "[32,1365,256]" in by_op and "44.0 MiB" in by_op


def evaluate_impacts(findings, of: Summary) -> list:
    """The findings with their rule's impact, ranked as the registry ranks them."""
    from profiler_service.analysis.findings import estimate, rank

    ranked = [f.model_copy(update={"impact": estimate(f, of)}) for f in findings]
    return sorted(ranked, key=rank)
