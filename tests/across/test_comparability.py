"""Like with like: two captures are compared only where they measured the same job doing the
same work. Hand-made summaries whose difference is known: a halved batch shortens every part of
the step alike and must not read as a saving; a fix shortens one part."""

from __future__ import annotations

import random

from profiler_service.across.comparability import differences
from profiler_service.across.verification import step_change, verify
from profiler_service.analysis.device_models import GpuActivity, GpuDevice
from profiler_service.analysis.models import (
    Finding,
    Impact,
    ProcessCpu,
    Severity,
    StepBreakdown,
    StepSample,
    StepTime,
    Summary,
)
from profiler_service.verification_record import DifferenceKind, FixStatus


def summary(step_ms: float, input_ms: float, cores: float = 2.0, gpus: list[str] | None = None,
            seed: int = 1) -> Summary:  # fmt: skip
    rng = random.Random(seed)
    times = [step_ms * (1 + rng.uniform(-0.02, 0.02)) for _ in range(60)]
    parts = StepBreakdown(input_ms=input_ms, host_compute_ms=step_ms - input_ms)
    return Summary(
        step_time=StepTime(
            count=len(times),
            avg_ms=sum(times) / len(times),
            breakdown_avg=parts,
            steps=[
                StepSample(name=str(i), step_time_ms=t, breakdown=parts)
                for i, t in enumerate(times)
            ],
        ),
        process_cpu=ProcessCpu(cores_available=cores, cores_used=1.0, source="agent"),
        gpu=GpuActivity(
            devices=[GpuDevice(device=f"/device:GPU:{i}", model=m) for i, m in enumerate(gpus)]
        )
        if gpus
        else None,
    )


def input_bound(saving: float) -> Finding:
    return Finding(
        rule="input_bound",
        severity=Severity.CRITICAL,
        title="input",
        impact_share=0.8,
        impact=Impact(
            step_ms_now=100, saving_share=saving, saving_range=(saving - 0.1, saving + 0.1)
        ),
    )


def test_a_halved_batch_is_named_and_checks_no_prediction():
    before, after = summary(100, 80), summary(50, 40, seed=2)
    [found] = differences(before, after)
    assert found.kind is DifferenceKind.SCALED
    assert "-50%" in found.detail and "examples per second" in found.detail
    change = step_change(before, after, seed="batch")
    assert change.note.startswith("not like with like: every part of the step moved alike")
    [v] = verify([input_bound(0.2)], [], change)
    assert v.status is FixStatus.RESOLVED
    assert v.prediction is None  # a 50 % shorter step of half the work proves no fix


def test_fixes_that_shorten_one_part_of_the_step_compare():
    broken = summary(100, 80)
    prefetched = summary(80, 5, seed=2)  # the wait overlapped, the compute the same
    moved_to_tf_ops = summary(8, 2, seed=3)  # the wait gone, the compute's GIL waits too
    same = summary(101, 80, seed=4)
    for after in (prefetched, moved_to_tf_ops, same):
        assert differences(broken, after) == []
    [v] = verify([input_bound(0.2)], [], step_change(broken, prefetched, seed="p"))
    assert v.prediction is not None


def test_other_hardware_is_not_like_with_like():
    h100 = summary(100, 10, gpus=["H100", "H100"])
    a100 = summary(60, 10, gpus=["A100", "A100"], seed=2)
    [gpus] = differences(h100, a100)
    assert gpus.kind is DifferenceKind.DEVICES
    assert gpus.detail == "GPUs 2 x H100 -> 2 x A100"
    [cores] = differences(summary(100, 80), summary(60, 40, cores=8.0, seed=2))
    assert cores.kind is DifferenceKind.CORES and cores.detail == "cores 2 -> 8"
    assert differences(summary(100, 10, gpus=["H100"]), summary(100, 10)) != []


def told(s: Summary, examples: float) -> Summary:
    s.step_time.examples_per_step = examples
    return s


def test_a_batch_the_markers_tell_is_compared_by_time_per_example():
    # Half the batch, a step 52 % as long: per example, 4 % slower, not a 48 % saving.
    before, after = told(summary(100, 80), 64), told(summary(52, 41.6, seed=2), 32)
    [found] = differences(before, after)
    assert found.kind is DifferenceKind.EXAMPLES and found.accounted
    assert found.detail == "examples a step 64 -> 32: compared by time per example"
    change = step_change(before, after, seed="batch")
    assert change.like_with_like and change.examples_per_step == (64, 32)
    assert abs(change.change_share - 0.04) < 0.01  # of the time per example
    lo, hi = change.change_interval_95
    assert lo < 0.04 < hi and lo > -0.02  # the interval is per example too
    assert "the batch changed (64 -> 32 examples a step)" in change.note
    [v] = verify([input_bound(0.4)], [], change)
    assert v.prediction is not None and v.prediction.value == "below"  # saved nothing
    # The same batch on both sides, told: a step that moved alike is a change, not a batch.
    same = told(summary(50, 40, seed=2), 64)
    assert differences(before, same) == []
    assert step_change(before, same, seed="b").change_share < -0.45


def test_a_batch_told_on_one_side_only_falls_back_to_the_parts():
    before, after = told(summary(100, 80), 64), summary(50, 40, seed=2)
    [found] = differences(before, after)
    assert found.kind is DifferenceKind.SCALED and not found.accounted
    assert not step_change(before, after, seed="x").like_with_like
