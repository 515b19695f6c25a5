"""The command line's memory line where a capture holds no allocator events: one line that says
what to do (the why and its cost stay in the snapshot and the report page)."""

from __future__ import annotations

from profiler_service.analysis.models import Summary
from profiler_service.analysis.readers import memory_events
from profiler_service.exporters.text_report import format_summary


def test_a_capture_without_memory_events_says_what_to_do_in_one_line():
    missing = memory_events.unrecorded(["vm"], on_gpu=False)
    lines = format_summary(Summary(hosts=["vm"], memory_unrecorded=missing))
    memory = [line for line in lines if "memory" in line.lower() or "allocator" in line.lower()]
    assert memory == [
        "memory: no allocator events (vm). Set TF_CPU_ALLOCATOR_USE_BFC=true in the job before "
        "TensorFlow is imported."
    ]
    assert missing.why not in "\n".join(lines)  # it was six more lines of why, remedy and cost


def test_a_capture_with_memory_events_has_no_memory_line():
    assert not [line for line in format_summary(Summary(hosts=["vm"])) if "memory" in line]
