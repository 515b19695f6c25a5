"""One analysis reads each capture file once and assembles its Summary in one place: every
reader returns its part (parts.py), and the input pipeline's four sources meet in `assemble`."""

from __future__ import annotations

import shutil
from pathlib import Path

from profiler_service.analysis.models import InputBound, InputIterator, InputPipeline, StepTime
from profiler_service.analysis.parts import Parts, assemble
from profiler_service.analysis.readers import host_events, xplane
from profiler_service.analysis.readers.op_stats import OpStats
from profiler_service.analysis.readers.overview import Overview
from profiler_service.analysis.summary import analyse_run

GPU_CAPTURE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "gpu-captures"
    / "mholmeslinder-semi-supervised-cv"
    / "2020_12_21_16_42_56"
)


def test_each_capture_file_is_parsed_once_and_its_host_events_walked_once(tmp_path, monkeypatch):
    """A real GPU capture: its span, host events, GPU planes and host activity all come from one
    parse and one pass over the host plane (there were up to four parses and two passes)."""
    run = tmp_path / "run"
    run.mkdir()
    for path in GPU_CAPTURE.glob("*.xplane.pb"):
        shutil.copy(path, run / path.name)
    parsed: list[Path] = []
    walked: list[tuple[Path, bool]] = []
    read_xspace, read_host_events = xplane.read_xspace, host_events.read_host_events

    def counting_read_xspace(path: Path):
        parsed.append(path)
        return read_xspace(path)

    def counting_read_host_events(capture, memory_allocator=None, activity=False):
        walked.append((capture.path, activity))
        return read_host_events(capture, memory_allocator, activity)

    monkeypatch.setattr(xplane, "read_xspace", counting_read_xspace)
    monkeypatch.setattr(
        "profiler_service.analysis.summary.read_host_events", counting_read_host_events
    )
    result = analyse_run(run)
    [capture] = run.glob("*.xplane.pb")
    assert parsed == [capture]
    assert walked == [(capture, True)], "one pass, classifying for the GPU reading too"
    assert result.summary.gpu is not None and result.summary.gpu.hosts, "the host's lane came"
    assert result.summary.step_time.count > 0


def test_the_input_pipeline_is_assembled_from_its_four_sources():
    overview = Overview(
        step_time=StepTime(count=10, avg_ms=20.0),
        classification=InputBound.HIGHLY,
        input_share=0.623,
        conclusion="Your program is HIGHLY input-bound because 62.3% ...",
    )
    tool = InputPipeline(
        slowest_stage="preprocessing",
        iterators=[InputIterator(path="Iterator::Prefetch::Map", self_time_ms=5.0)],
    )
    op_stats = OpStats(top_ops=[], op_category_share={}, python_in_pipeline=True)
    stats = {"Iterator::Prefetch::Map": {"parallelism": 1, "name": "MapDataset:3"}}
    summary = assemble(
        Parts(
            overview=overview,
            input_pipeline=tool,
            op_stats=op_stats,
            iterator_stats=[{}, stats, {"Iterator::Prefetch::Map": {"parallelism": 8}}],
        )
    )
    pipeline = summary.input_pipeline
    assert (pipeline.classification, pipeline.input_share) == (InputBound.HIGHLY, 0.623)
    assert pipeline.conclusion == overview.conclusion  # the overview's verdict
    assert pipeline.slowest_stage == "preprocessing"  # the input pipeline analyzer's stages
    assert pipeline.python_in_pipeline  # the op stats'
    [iterator] = pipeline.iterators  # the first host whose events name the iterator
    assert (iterator.parallelism, iterator.datasets) == (1, "MapDataset:3")
    assert tool.classification is InputBound.UNKNOWN, "a reader's part is not written into"


def test_a_summary_without_parts_is_empty():
    summary = assemble(Parts(hosts=["h"]))
    assert summary.step_time.count == 0
    assert summary.input_pipeline == InputPipeline()
    assert summary.hosts == ["h"]
