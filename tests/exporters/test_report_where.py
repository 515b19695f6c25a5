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
