"""Verification: a job's new snapshot against its last one that raised findings. Hand-made
summaries with per-step samples whose answer is known; the job's history read from a real store."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from profiler_service.across.verification import headline, step_change, verify
from profiler_service.analysis.findings import estimate
from profiler_service.analysis.models import (
    Finding,
    InputIterator,
    InputPipeline,
    ProcessCpu,
    Severity,
    StepBreakdown,
    StepSample,
    StepTime,
    Summary,
)
from profiler_service.capture.snapshot_steps import verify_against_history
from profiler_service.exporters.text_report import format_snapshot
from profiler_service.models import CaptureOptions, Snapshot, SnapshotStatus, Trigger
from profiler_service.store.snapshot_store import SnapshotStore
from profiler_service.verification_record import FixStatus, PredictionCheck

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def captured(times_ms: list[float]) -> Summary:
    steps = [
        StepSample(name=str(i), step_time_ms=t, breakdown=StepBreakdown())
        for i, t in enumerate(times_ms)
    ]
    avg = sum(times_ms) / len(times_ms)
    return Summary(step_time=StepTime(count=len(times_ms), avg_ms=avg, steps=steps))


def noisy(mean_ms: float, n: int, seed: int, spread: float = 0.05) -> list[float]:
    rng = random.Random(seed)
    return [mean_ms * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_the_same_job_twice_has_an_interval_around_no_change():
    change = step_change(captured(noisy(20, 100, 1)), captured(noisy(20, 100, 2)), seed="a")
    lo, hi = change.change_interval_95
    assert lo < 0 < hi and hi - lo < 0.03
    assert not change.slower and not change.faster


def test_a_job_ten_percent_slower_is_slower_beyond_the_noise():
    change = step_change(captured(noisy(20, 100, 1)), captured(noisy(22, 100, 2)), seed="b")
    assert change.change_share == pytest.approx(0.10, abs=0.01)
    assert change.slower and 0.08 < change.change_interval_95[0] < 0.10
    assert step_change(captured(noisy(20, 100, 1)), captured(noisy(22, 100, 2)), seed="b") == (
        change
    )  # the same snapshots, the same interval


def test_a_one_step_capture_has_no_interval_and_says_so():
    change = step_change(captured([20.0]), captured(noisy(10, 50, 2)))
    assert change.change_share == pytest.approx(-0.5, abs=0.01)
    assert change.change_interval_95 is None and "no interval" in change.note


def finding(rule: str, share: float, **evidence) -> Finding:
    found = Finding(
        rule=rule, severity=Severity.WARNING, title=rule, impact_share=share, evidence=evidence
    )
    eight_cores = captured([100.0] * 10).model_copy(
        update={"process_cpu": ProcessCpu(cores_available=8, source="agent")}
    )
    found.impact = estimate(found, eight_cores)
    return found


def test_each_rule_is_resolved_persists_regressed_or_new():
    before = [
        finding("input_bound", 0.9, input_share=0.9),
        finding("retracing", 0.10),
        finding("host_overhead", 0.20),
    ]
    after = [finding("retracing", 0.20), finding("host_overhead", 0.21), finding("straggler", 0.1)]
    change = step_change(captured(noisy(100, 60, 1)), captured(noisy(12, 60, 2)))
    checked = {v.rule: v for v in verify(before, after, change)}
    assert {r: v.status for r, v in checked.items()} == {
        "input_bound": FixStatus.RESOLVED,
        "retracing": FixStatus.REGRESSED,  # 10 % -> 20 % of the step at stake
        "host_overhead": FixStatus.PERSISTS,
        "straggler": FixStatus.NEW,
    }
    resolved = checked["input_bound"]
    assert resolved.predicted_saving_share == pytest.approx(0.875)  # 100 ms over 8 cores
    assert resolved.measured_saving_share == pytest.approx(0.88, abs=0.02)
    assert checked["host_overhead"].measured_saving_share == resolved.measured_saving_share
    assert checked["straggler"].measured_saving_share is None  # new: nothing predicted
    assert resolved.prediction is PredictionCheck.WITHIN  # 0.88 within 0.875's range
    assert checked["host_overhead"].prediction is None  # the faster step is input_bound's fix
    assert next(iter(checked)) == "input_bound"  # resolved first


def test_a_slower_step_makes_a_persisting_finding_regressed():
    before, after = [finding("host_overhead", 0.2)], [finding("host_overhead", 0.2)]
    change = step_change(captured(noisy(20, 80, 1)), captured(noisy(25, 80, 2)))
    [checked] = verify(before, after, change)
    assert checked.status is FixStatus.REGRESSED


def test_the_headline_names_each_status_the_step_change_and_the_prediction():
    change = step_change(captured(noisy(76, 60, 1)), captured(noisy(10, 60, 2)))
    checked = verify([finding("input_bound", 0.96, input_share=0.96)], [], change)
    text = headline("20261205-120000-trainer-aaa", checked)
    assert text.startswith("Since 20261205-120000-trainer-aaa: input_bound resolved")
    assert "(predicted -88%)" in text and "step 75.9 -> 10.1 ms (-87%, 95% interval" in text
    # 96 % saved where a half of the step waited on input: more than its range, named.
    faster = step_change(captured(noisy(76, 60, 1)), captured(noisy(3, 60, 2)))
    [above] = verify([finding("input_bound", 0.5, input_share=0.5)], [], faster)
    lo, hi = above.predicted_saving_range
    assert hi < 0.96 and above.prediction is PredictionCheck.ABOVE
    assert f"(saved 96%, above the predicted {lo:.0%}-{hi:.0%}" in headline("x", [above])


def test_a_prediction_is_checked_where_something_changed_and_a_miss_is_named():
    # 100 ms, 90 % of it input wait, over 8 cores: 87.5 % predicted, within the spread.
    before = [finding("input_bound", 0.9, input_share=0.9)]
    fixed_by_third = step_change(captured(noisy(100, 60, 1)), captured(noisy(70, 60, 2)))
    [persists] = verify(before, [finding("input_bound", 0.8, input_share=0.8)], fixed_by_third)
    assert persists.status is FixStatus.PERSISTS and persists.prediction is PredictionCheck.BELOW
    lo, hi = persists.predicted_saving_range
    assert 0.3 < lo < 0.875 < hi  # the point, 87.5 %, with the calibrated spread about it
    text = headline("20261205-120000-trainer-aaa", [persists])
    assert f"input_bound persists (saved 29%, below the predicted {lo:.0%}-{hi:.0%}: one" in text
    assert "capture again to confirm" in text

    # Nothing changed: a finding that persists is not held against its prediction.
    unchanged = step_change(captured(noisy(100, 60, 1)), captured(noisy(100, 60, 2)))
    [untouched] = verify(before, before, unchanged)
    assert untouched.measured_saving_share is not None and untouched.prediction is None
    assert "below" not in headline("x", [untouched])

    # Saved more than the whole wait: some other change too.
    fixed_by_half = step_change(captured(noisy(100, 60, 1)), captured(noisy(50, 60, 2)))
    small = [finding("input_bound", 0.2, input_share=0.2)]
    [beyond] = verify(small, [], fixed_by_half)
    assert beyond.prediction is PredictionCheck.ABOVE and "above the predicted" in headline(
        "x", [beyond]
    )

    # Two findings resolved together: the step's change is neither's alone.
    both = verify([*before, finding("retracing", 0.05)], [], fixed_by_half)
    assert [v.status for v in both] == [FixStatus.RESOLVED] * 2
    assert [v.prediction for v in both] == [None, None]

    # A memory finding promised no step time: resolved, nothing to check.
    memory = Finding(rule="step_temporaries", severity=Severity.WARNING, title="t", impact_share=0)
    memory.impact = estimate(memory, captured([100.0] * 10))
    assert memory.impact.saving_range == (0.0, 0.0)
    [freed] = verify([memory], [], fixed_by_half)
    assert freed.status is FixStatus.RESOLVED and freed.prediction is None


def snapshot(i: int, summary: Summary, findings: list[Finding], **fields) -> Snapshot:
    return Snapshot(
        id=f"2026120{i}-120000-trainer-{i:06x}",
        target="trainer",
        trigger=Trigger(),
        capture=CaptureOptions(
            duration_ms=2000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        created_at=T0 + timedelta(minutes=i),
        summary=summary,
        findings=findings,
        **fields,
    )


def publish(store: SnapshotStore, snap: Snapshot) -> Snapshot:
    store.begin(snap)
    snap.status = SnapshotStatus.ANALYZING
    store.update(snap)
    return store.publish(snap)


def test_a_snapshot_names_its_jobs_previous_and_is_checked_against_its_last_with_findings(
    make_service,
):
    service = make_service()
    store = service.store
    slow = captured(noisy(76, 40, 1))
    publish(store, snapshot(1, slow, [finding("input_bound", 0.96, input_share=0.96)]))
    publish(store, snapshot(2, slow, []))  # the same job, nothing found (a quiet hour)
    publish(store, snapshot(3, slow, [], namespace="other"))  # another namespace's job
    publish(store, snapshot(4, slow, [], workload="other"))  # another workload's
    fixed = snapshot(5, captured(noisy(3, 40, 2)), [])
    verify_against_history(store, fixed)
    assert fixed.previous_id == "20261202-120000-trainer-000002"
    assert fixed.verified_against == "20261201-120000-trainer-000001"
    [checked] = fixed.verification
    assert checked.status is FixStatus.RESOLVED and checked.measured_saving_share > 0.9
    assert fixed.step_change.change_interval_95[1] < -0.9
    printed = format_snapshot(publish(store, fixed))
    assert "Since 20261201-120000-trainer-000001: input_bound resolved" in printed


def test_the_first_snapshot_of_a_job_has_nothing_to_verify(make_service):
    service = make_service()
    first = snapshot(1, captured([10.0] * 5), [finding("retracing", 0.3)])
    verify_against_history(service.store, first)
    assert first.previous_id is None and first.verification == []


def test_the_step_time_gate_decides_past_the_threshold_and_beyond_the_noise():
    from profiler_service.across.compare import GateMetric, compare

    def pair(base_ms: list[float], head_ms: list[float]):
        return compare(snapshot(1, captured(base_ms), []), snapshot(2, captured(head_ms), []))

    # 12 % slower on average, but the steps swing by ±40 %: not beyond a 10 % gate.
    noisy_pair = pair(noisy(20, 30, 1, spread=0.4), noisy(22.4, 30, 2, spread=0.4))
    assert noisy_pair.ratio(GateMetric.STEP_TIME) > 1.10
    assert noisy_pair.step_change.change_interval_95[0] < 0.10
    assert noisy_pair.is_regression(GateMetric.STEP_TIME, 0.10) is False
    # 15 % slower with steady steps: past the gate, and beyond the noise of the steps and of
    # what two captures differ by (assumed: these snapshots have no look-back).
    steady = pair(noisy(20, 100, 1, spread=0.02), noisy(23, 100, 2, spread=0.02))
    assert steady.step_change.between_captures_source.startswith("assumed")
    assert steady.is_regression(GateMetric.STEP_TIME, 0.10) is True
    # 9 % slower with the same steady steps: not past the gate.
    under = pair(noisy(20, 100, 1, spread=0.02), noisy(21.8, 100, 2, spread=0.02))
    assert under.is_regression(GateMetric.STEP_TIME, 0.10) is False
    # One step a side: the bare ratio decides, and the comparison says why.
    single = pair([20.0], [23.0])
    assert single.is_regression(GateMetric.STEP_TIME, 0.10) is True
    assert any("no interval" in note for note in single.notes)


def test_a_fix_is_held_against_the_changes_the_next_capture_shows():
    """The finding predicted each change apart; the next capture's pipeline shows the map made
    parallel and a prefetch at its end, the Python still there: that pair's range is the one the
    saving is held against, and the headline says which changes it saw."""
    before = finding(
        "input_bound",
        0.9,
        input_share=0.9,
        python_in_pipeline=True,
        pipeline_lacks=["python", "parallel_calls", "prefetch", "cache"],
    )
    tuned = InputPipeline(
        python_in_pipeline=True,
        iterators=[
            InputIterator(path="Iterator::Root::Prefetch", self_time_ms=10.0),
            InputIterator(
                path="Iterator::Root::Prefetch::ParallelMapV2", self_time_ms=8.0, parallelism=8
            ),
        ],
    )
    after = captured(noisy(30, 60, 2)).model_copy(update={"input_pipeline": tuned})
    change = step_change(captured(noisy(100, 60, 1)), after)
    [checked] = verify([before], [], change, after)
    seen = before.impact.action("parallel_calls+prefetch")
    assert checked.action == "parallel_calls+prefetch"
    assert checked.predicted_saving_range == seen.saving_range
    assert checked.predicted_saving_share == seen.saving_share != before.impact.saving_share
    assert "[seen: the map made parallel and a prefetch at the end]" in headline("x", [checked])
    # A later capture whose pipeline XProf did not read: the whole recommendation's prediction.
    [unread] = verify([before], [], change, captured(noisy(30, 60, 2)))
    assert unread.action is None
    assert unread.predicted_saving_range == before.impact.saving_range


def test_a_change_predicted_to_slow_the_step_is_held_against_that_prediction():
    """Computing Python made parallel on 2 cores: a GIL convoy, predicted slower. The next
    capture shows the map parallel, the Python still there, and a step 30 % slower: a regression,
    as the finding said it would be, and held against that."""
    before = Finding(
        rule="input_bound", severity=Severity.WARNING, title="", impact_share=0.9,
        evidence={"input_share": 0.9, "python_in_pipeline": True,
                  "pipeline_lacks": ["python", "parallel_calls", "prefetch"]},
    )  # fmt: skip
    busy = captured([100.0] * 10).model_copy(
        update={"process_cpu": ProcessCpu(cores_available=2, cores_used=1.0, source="agent")}
    )
    before.impact = estimate(before, busy)
    predicted = before.impact.action("parallel_calls")
    lo, hi = predicted.saving_range
    assert predicted.saving_share < 0 and lo < -0.3 < hi < 0
    parallel = InputPipeline(
        python_in_pipeline=True,
        iterators=[InputIterator(path="Iterator::Root::ParallelMapV2", self_time_ms=8.0,
                                 parallelism=2)],
    )  # fmt: skip
    after = captured(noisy(130, 60, 2)).model_copy(update={"input_pipeline": parallel})
    change = step_change(captured(noisy(100, 60, 1)), after)
    [checked] = verify([before], [before], change, after)
    assert checked.status is FixStatus.REGRESSED and checked.action == "parallel_calls"
    assert checked.prediction is PredictionCheck.WITHIN
    assert f"regressed (as predicted: {-predicted.saving_share:.0%} slower)" in headline(
        "x", [checked]
    )
    # Had it predicted a saving, a slower step would not be held against it.
    [unpredicted] = verify([finding("input_bound", 0.9, input_share=0.9)], [before], change)
    assert unpredicted.status is FixStatus.REGRESSED and unpredicted.prediction is None
