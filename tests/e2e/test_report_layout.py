"""The report page's layout in real headless Chromium: table headers and the cells beside a long
op name break between words only (the names squeezed them to "wher e", "occurrence s"), and the
step chart says what its bars are where they are fewer than the steps counted ("17 steps" over
14 bars)."""

from __future__ import annotations

from datetime import UTC, datetime

from profiler_service.analysis.models import (
    OpCategory,
    StepBreakdown,
    StepSample,
    StepTime,
    Summary,
    TopOp,
)
from profiler_service.config import ReportSettings
from profiler_service.exporters.report import render_report
from profiler_service.models import CaptureOptions, Snapshot, SnapshotStatus, Trigger, TriggerKind

# What a Keras job's op names look like: long, and without a space to break at.
LONG = "sequential_1/dense_3/MatMul/ReadVariableOp/resource_gather_nd_with_a_long_tail"

# The words of the cells `selector` finds that are split across lines (a word's range then has
# client rectangles on two lines).
SPLIT_WORDS = """(selector) => {
  const split = [];
  for (const cell of document.querySelectorAll(selector)) {
    const text = cell.firstChild;
    if (!text || text.nodeType !== Node.TEXT_NODE) continue;
    const re = /\\S+/g; let m;
    while ((m = re.exec(text.data)) !== null) {
      const range = document.createRange();
      range.setStart(text, m.index); range.setEnd(text, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (lines.size > 1) split.push(m[0]);
    }
  }
  return split;
}"""


def snapshot() -> Snapshot:
    steps = [
        StepSample(name=f"train {i}", step_time_ms=80.0, breakdown=StepBreakdown(input_ms=70.0,
                   host_compute_ms=10.0))
        for i in range(1, 15)
    ]  # fmt: skip
    ops = [
        TopOp(name=f"{LONG}_{i}", type="MatMul", host_or_device="host", category=OpCategory.COMPUTE,
              occurrences=1234, self_time_ms=12.5, self_time_share=0.2)
        for i in range(5)
    ]  # fmt: skip
    return Snapshot(
        id="20260105-120000-default-abc123",
        status=SnapshotStatus.READY,
        target="default",
        trigger=Trigger(kind=TriggerKind.API),
        capture=CaptureOptions(
            duration_ms=2000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        created_at=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
        # 17 steps ran while captured; XProf timed 14 whole (it sets the first and last aside,
        # and the capture's start cut one more).
        summary=Summary(step_time=steps_17_of_14(steps), top_ops=ops),
    )


def steps_17_of_14(steps: list[StepSample]) -> StepTime:
    return StepTime(
        count=17, markers=14, avg_ms=80.0, min_ms=80.0, max_ms=80.0, stddev_ms=0.0, steps=steps
    )


def test_headers_break_between_words_and_the_step_chart_says_what_its_bars_are(browser):
    html = render_report(snapshot(), ReportSettings())
    for width in (1100, 700):  # a laptop's window, half a screen
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.set_content(html)
        assert page.locator("#top-ops th").count() == 7
        assert page.evaluate(SPLIT_WORDS, "th") == [], width
        # Nor the cells beside an op's long name ("MatM ul", "20.0 %"); the page fits its width.
        assert page.evaluate(SPLIT_WORDS, "#top-ops td:not(:first-child)") == [], width
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        bars = page.locator("#step-chart rect.bar[fill]")
        assert bars.count() == 14 * 2  # two parts a step
        caption = page.locator("#step-chart-caption").inner_text()
        assert caption.startswith("14 bars, one per step XProf timed whole"), caption
        assert "3 more ran at the capture's start and end" in caption, caption
        page.close()
