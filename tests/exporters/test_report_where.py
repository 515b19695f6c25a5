"""The report page names the user's code beside a finding (`where`), with a link to the stacks."""

from __future__ import annotations

from datetime import UTC, datetime

from profiler_service.analysis.models import CodeSite, Finding, Severity, Summary
from profiler_service.config import ReportSettings
from profiler_service.exporters.report import render_report
from profiler_service.models import (
    CaptureOptions,
    Snapshot,
    SnapshotFile,
    SnapshotStatus,
    Trigger,
    TriggerKind,
)
from profiler_service.probes.python_stacks import STACKS_FILE

DECODE = CodeSite(file="/app/train.py", line=42, function="decode<b>", share=0.93)


def snapshot(findings: list[Finding], files: list[str]) -> Snapshot:
    return Snapshot(
        id="20260105-120000-default-abc123",
        status=SnapshotStatus.READY,
        target="default",
        trigger=Trigger(kind=TriggerKind.API),
        capture=CaptureOptions(
            duration_ms=2000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        created_at=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
        files=[SnapshotFile(name=name, size_bytes=10) for name in files],
        summary=Summary(),
        findings=findings,
    )


def finding(rule: str, where: list[CodeSite]) -> Finding:
    return Finding(rule=rule, severity=Severity.WARNING, title=rule, where=where)


def test_the_finding_names_its_code_and_links_the_stacks():
    html = render_report(
        snapshot(
            [finding("input_bound", [DECODE]), finding("op_dominates", [])],
            ["host.xplane.pb", STACKS_FILE],
        ),
        ReportSettings(),
    )
    card = html[html.index('data-rule="input_bound"') : html.index('data-rule="op_dominates"')]
    assert '<div class="where">In your code: ' in card
    assert (
        '<code title="/app/train.py">decode&lt;b&gt;</code> train.py:42 (93% of its samples)'
        in card
    )
    assert f'href="/profiles/20260105-120000-default-abc123/files/{STACKS_FILE}"' in card
    rest = html[html.index('data-rule="op_dominates"') :]
    assert 'class="where"' not in rest.split("</div>\n  </div>", 1)[0]


def test_no_where_no_line():
    html = render_report(snapshot([finding("input_bound", [])], ["h.xplane.pb"]), ReportSettings())
    assert 'class="where"' not in html


def test_the_wiring_line_the_traced_function_and_readable_evidence():
    from profiler_service.analysis.models import CodeLine

    wired = DECODE.model_copy(
        update={"wired_at": CodeLine(file="/app/data.py", line=88, code="ds.map(decode)")}
    )
    call = CodeSite(file="/app/train.py", line=50, function="loop", share=1.0, traces="step")
    retrace = finding("retracing", [call])
    retrace.evidence = {"function": "step", "traces": 12, "jit_compile": False,
                        "tracing_share": 0.123456, "traced_in_all": None}  # fmt: skip
    pipeline = finding("input_bound", [wired])
    pipeline.evidence = {"pipeline_has": [], "pipeline_lacks": ["python", "prefetch"]}
    html = render_report(snapshot([pipeline, retrace], ["h.xplane.pb"]), ReportSettings())
    assert (
        'wired into the pipeline at <code title="/app/data.py">data.py:88</code> '
        "<code>ds.map(decode)</code>" in html
    )
    assert "train.py:50, calling <code>step</code> (100% of its samples)" in html
    # evidence in words: no raw Python values, each labelled with what it is
    assert "pipeline has</span> <code>none</code>" in html
    assert "pipeline lacks</span> <code>python, prefetch</code>" in html
    assert "jit compile</span> <code>no</code>" in html and "<code>0.1235</code>" in html
    assert "<code>[]</code>" not in html and "<code>False</code>" not in html
    assert "traced in all" not in html  # no value: not shown
    assert '<span title="its calls in the capture that traced it again">traces</span>' in html
