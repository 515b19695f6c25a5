"""Many runs at once: `profiler-service analyze` over a logdir or a tree of them, one row a run.

Users keep years of TensorBoard logdirs, and a corpus of real captures is how the analysis is
tested. A run is one directory's `*.xplane.pb` files. TensorFlow 2.2-2.4 also wrote its own
overview (`<host>.overview_page.pb`) beside the capture: its verdict then is shown beside ours.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from profiler_service.analysis.gpu_models import describe_devices
from profiler_service.analysis.input_evidence import InputBoundEvidence
from profiler_service.analysis.renamed_fields import percent
from profiler_service.analysis.rule import Rule

if TYPE_CHECKING:
    from profiler_service.analysis.runner.analyzer import XprofAnalyzer
    from profiler_service.analysis.summary import AnalysisResult

TOP_FINDINGS = 3  # findings named per row of the table (the JSON has them all)
# Path parts left out of a run's short name: every TensorBoard run has them.
_LAYOUT_PARTS = ("plugins", "profile")
# TF's overview statement: "Your program is HIGHLY input-bound because ..." (also NOT,
# MODERATELY, POTENTIALLY; TPUs' statements differ and give no word).
_STATEMENT = re.compile(r"Your program is (HIGHLY|MODERATELY|POTENTIALLY|NOT) input-bound")


class FindingBrief(BaseModel):
    rule: str
    severity: str
    title: str


class OurVerdict(BaseModel):
    # models.InputBound: highly, moderately, potentially, not, unknown. The input_bound
    # finding's when there is one (it may read the GPU's wait where XProf says "potentially").
    classification: str
    input_share_pct: float | None = None
    bottleneck: str | None = None  # XProf's, now: input, host, device, both, unknown
    source: str = "xprof"  # or gpu_idle_in_iterator: the share of the capture a GPU waited
    findings: list[FindingBrief] = Field(default_factory=list)


class TensorFlowVerdict(BaseModel):
    """What TensorFlow's profiler said at capture time (the `overview_page.pb` it wrote)."""

    classification: str | None = None  # highly, moderately, potentially, not; None: no statement
    input_pct: float | None = None
    bottleneck: str | None = None
    device_compute_16bit_pct: float | None = None
    statement: str = ""


class RunRow(BaseModel):
    run: str  # relative to the folder analysed, without plugins/profile
    path: str
    devices: str = ""
    steps: int | None = None
    step_time_ms: float | None = None
    ours: OurVerdict | None = None
    then_by_tensorflow: TensorFlowVerdict | None = None
    analysis_s: float | None = None
    error: str | None = None


def find_runs(root: Path) -> list[Path]:
    """Every directory under `root` (itself included) holding `*.xplane.pb`, by path; hidden
    folders (a store's `.staging`, `.git`) are skipped."""
    dirs = {
        p.parent
        for p in root.rglob("*.xplane.pb")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }
    return sorted(dirs, key=lambda d: d.relative_to(root).parts)


def short_name(run: Path, root: Path) -> str:
    """The run's path relative to `root`, without the `plugins/profile` every run has."""
    parts = list(run.relative_to(root).parts)
    for i in range(len(parts) - 1):
        if tuple(parts[i : i + 2]) == _LAYOUT_PARTS:
            del parts[i : i + 2]
            break
    return "/".join(parts) or "."


def read_tensorflow_verdict(run: Path) -> TensorFlowVerdict | None:
    """TF's verdict at capture time, read with XProf's own proto; None when the run has no
    overview page, or it cannot be read (then the row just lacks it)."""
    pages = sorted(run.glob("*.overview_page.pb"))
    if not pages:
        return None
    try:
        from google.protobuf.message import DecodeError
        from xprof.protobuf.overview_page_pb2 import OverviewPage
    except ImportError:
        return None
    page = OverviewPage()
    try:
        page.ParseFromString(pages[0].read_bytes())
    except (OSError, DecodeError):
        return None
    statement = page.recommendation.statement
    match = _STATEMENT.search(statement)
    analysis = page.analysis
    return TensorFlowVerdict(
        classification=match.group(1).lower() if match else None,
        input_pct=round(page.input_analysis.input_percent, 1),
        bottleneck=page.recommendation.bottleneck or None,
        # Both shares are 0 where TF did not measure precision (CPU, or a TF before 2.3).
        device_compute_16bit_pct=(
            round(analysis.device_compute_16bit_percent, 1)
            if analysis.device_compute_16bit_percent or analysis.device_compute_32bit_percent
            else None
        ),
        statement=statement,
    )


def row_of(result: AnalysisResult) -> dict:
    """The row's fields that come from our analysis."""
    summary = result.summary
    pipeline = summary.input_pipeline
    verdict = {"classification": pipeline.classification.value}
    # `analyze`'s rows keep their percentage (docs/findings.md documents them).
    share = pipeline.input_share
    verdict["input_share_pct"] = None if share is None else percent(share)
    found = next((f for f in result.findings if f.rule == Rule.INPUT_BOUND), None)
    if found is not None:
        evidence = InputBoundEvidence.model_validate(found.evidence)
        verdict = {
            "classification": evidence.classification,
            "input_share_pct": percent(evidence.input_share),
            "source": evidence.source,
        }
    return {
        "devices": describe_devices(summary),
        "steps": summary.step_time.count,
        "step_time_ms": summary.step_time.avg_ms,
        "ours": OurVerdict(
            **verdict,
            bottleneck=summary.bottleneck,
            findings=[
                FindingBrief(rule=f.rule, severity=f.severity.value, title=f.title)
                for f in result.findings
            ],
        ),
    }


def analyse_runs(
    root: Path,
    runs: Iterable[Path],
    analyzer: XprofAnalyzer,
    done: Callable[[RunRow], None] = lambda row: None,
) -> list[RunRow]:
    """Each run analysed on a copy (XProf writes cache files beside the capture; the input may
    be read-only) by one analyzer, so its warm worker serves them all; a failure is its row."""
    from profiler_service.analysis.runner.analyzer import AnalysisFailed

    rows = []
    with tempfile.TemporaryDirectory(prefix="profiler-analyze-") as tmp:
        for i, run in enumerate(runs):
            row = RunRow(
                run=short_name(run, root),
                path=str(run),
                then_by_tensorflow=read_tensorflow_verdict(run),
            )
            copy = Path(tmp) / str(i)
            copy.mkdir()
            try:
                for path in sorted(run.glob("*.xplane.pb")):
                    shutil.copy(path, copy / path.name)
                started = time.monotonic()
                try:
                    result = analyzer.analyze(copy)
                finally:
                    row.analysis_s = round(time.monotonic() - started, 2)
                for name, value in row_of(result).items():
                    setattr(row, name, value)
            except AnalysisFailed as exc:  # named by the run, not by its temporary copy
                row.error = f"{exc.code}: {exc.detail}".replace(str(copy), str(run))
            except OSError as exc:  # unreadable, or vanished while we read the tree
                row.error = f"cannot copy the capture: {exc}"
            finally:
                shutil.rmtree(copy, ignore_errors=True)
            done(row)
            rows.append(row)
    return rows


def format_table(rows: list[RunRow]) -> list[str]:
    """One line a run; the findings last, since they are the widest."""
    header = ("run", "devices", "steps", "step ms", "ours", "TF then", "s", "top findings")
    table = [header] + [_cells(row) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    right = {2, 3, 6}  # numbers
    lines = []
    for line in table:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=False))
        ]
        lines.append("  ".join([*cells, line[-1]]).rstrip())
    return lines


def _cells(row: RunRow) -> tuple[str, ...]:
    tf = row.then_by_tensorflow
    then = _verdict(tf.classification, tf.input_pct, tf.bottleneck) if tf else "-"
    seconds = "" if row.analysis_s is None else f"{row.analysis_s:.2f}"
    if row.ours is None:
        return (row.run, row.devices, "", "", "FAILED", then, seconds, row.error or "")
    ours = row.ours
    top = ours.findings[:TOP_FINDINGS]
    findings = ", ".join(f"{f.rule} ({f.severity})" for f in top) or "none"
    step_ms = "" if row.step_time_ms is None else f"{row.step_time_ms:.1f}"
    return (
        row.run,
        row.devices,
        str(row.steps),
        step_ms,
        _verdict(ours.classification, ours.input_share_pct, ours.bottleneck),
        then,
        seconds,
        findings,
    )


def _verdict(classification: str | None, input_pct: float | None, bottleneck: str | None) -> str:
    """`highly 41.6% host`: the input-bound word, the share of step time in input, the
    bottleneck."""
    words = [classification or "?"]
    if input_pct is not None:
        words.append(f"{input_pct:.1f}%")
    if bottleneck:
        words.append(bottleneck)
    return " ".join(words)


def format_totals(rows: list[RunRow], wall_s: float) -> str:
    analysed = [r.analysis_s for r in rows if r.analysis_s is not None]
    failed = sum(1 for r in rows if r.error)
    per_run = sum(analysed) / len(analysed) if analysed else 0.0
    return (
        f"{len(rows)} runs, {failed} failed; analysis {sum(analysed):.1f} s "
        f"({per_run:.2f} s per run), {wall_s:.1f} s in all"
    )
