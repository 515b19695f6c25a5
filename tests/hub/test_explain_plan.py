"""The explain policy's decisions without a hub (hub/explain.py `plan`, `sidecar_of`): which jobs
a round asks, in which order, within which budget, and why the others wait. The hub, its sidecars
and Prometheus together: test_explain_idle.py."""

from __future__ import annotations

from profiler_service.hub.explain import HOUR_S, JobAsk, plan, sidecar_of
from profiler_service.hub.ledger import JobLedger, Ledger
from profiler_service.sidecar_record import SidecarRecord
from profiler_service.trigger.outcomes import Outcome

NOW = 1_900_000_000.0


def job(name: str, no_capture: float, namespace: str = "ml", pods: list[str] | None = None):
    return JobLedger(
        namespace=namespace,
        job=name,
        pods=pods if pods is not None else [f"{name}-0"],
        idle_by_cause={"no_capture": no_capture} if no_capture else {"input": 1.0},
    )


def sidecar(pod: str, namespace: str = "ml", workload: str | None = None) -> SidecarRecord:
    return SidecarRecord(
        name=pod, namespace=namespace, pod=pod, workload=workload, targets=["trainer"],
        url=f"http://{pod}.example:8080",
    )  # fmt: skip


def ledger(*jobs: JobLedger) -> Ledger:
    return Ledger(window="6h", start=NOW - 6 * 3600, end=NOW, source="prometheus", jobs=list(jobs))


def asked(name: str, outcome: Outcome, ago_s: float, namespace: str = "ml") -> JobAsk:
    return JobAsk(
        namespace=namespace, job=name, no_capture_gpu_hours=1.0, at=NOW - ago_s, outcome=outcome
    )


def test_the_most_unexplained_jobs_are_asked_first_within_the_budget():
    fleet = ledger(job("small", 2.0), job("big", 30.0), job("explained", 0.0), job("mid", 9.0))
    sidecars = [sidecar("small-0"), sidecar("big-0"), sidecar("mid-0"), sidecar("explained-0")]
    decided = plan(fleet, sidecars, {}, now=NOW, captures_per_h=2)
    assert [(j.job, s.pod) for j, s in decided.ask] == [("big", "big-0"), ("mid", "mid-0")]
    assert [j.job for j in decided.waiting] == ["small"]
    assert "budget (2 captures, 0 started)" in decided.waiting[0].detail
    assert decided.no_sidecar == []


def test_captures_started_within_the_hour_spend_the_budget_and_busy_answers_do_not():
    fleet = ledger(job("a", 5.0), job("b", 4.0), job("c", 3.0))
    sidecars = [sidecar("a-0"), sidecar("b-0"), sidecar("c-0")]
    before = {
        "ml/x": asked("x", Outcome.CAPTURED, 0.5 * HOUR_S),  # spent
        "ml/y": asked("y", Outcome.CAPTURED, 1.5 * HOUR_S),  # an hour ago: no longer spent
        "ml/b": asked("b", Outcome.SKIPPED_BUSY, 60),  # asked again: busy is not final
    }
    decided = plan(fleet, sidecars, before, now=NOW, captures_per_h=3)
    assert decided.budget_left == 2
    assert [j.job for j, _ in decided.ask] == ["a", "b"]
    assert [j.job for j in decided.waiting] == ["c"]


def test_a_job_captured_deduplicated_or_refused_within_the_horizon_is_not_asked_again():
    fleet = ledger(job("a", 5.0), job("b", 4.0), job("c", 3.0), job("d", 2.0))
    sidecars = [sidecar(f"{n}-0") for n in "abcd"]
    before = {
        "ml/a": asked("a", Outcome.CAPTURED, 3 * HOUR_S),
        "ml/b": asked("b", Outcome.DEDUPLICATED, 60),
        "ml/c": asked("c", Outcome.REJECTED, 60),
    }
    decided = plan(fleet, sidecars, before, now=NOW, captures_per_h=10)
    assert [j.job for j, _ in decided.ask] == ["d"]
    assert decided.waiting == [] and decided.no_sidecar == []


def test_a_job_no_live_sidecar_profiles_is_listed_and_never_spends_the_budget():
    fleet = ledger(job("orphan", 50.0, namespace="team-b"), job("mine", 1.0, namespace="team-b"))
    # A sidecar of another namespace with the same pod name is not the orphan's.
    sidecars = [sidecar("orphan-0", namespace="team-a"), sidecar("mine-0", namespace="team-b")]
    decided = plan(fleet, sidecars, {}, now=NOW, captures_per_h=1)
    assert [j.key for j in decided.no_sidecar] == ["team-b/orphan"]
    assert [j.key for j, _ in decided.ask] == ["team-b/mine"]


def test_a_job_s_sidecar_is_found_by_workload_by_pod_or_by_the_pod_s_job():
    bert = job("bert", 3.0, pods=["bert-7d9f8b6c5d-x2x4z", "bert-7d9f8b6c5d-q8w2p"])
    by_workload = sidecar("bert-7d9f8b6c5d-zzzzz", workload="bert")  # a pod not yet counted
    by_pod = sidecar("bert-7d9f8b6c5d-q8w2p")
    assert sidecar_of(bert, [by_workload]) is by_workload
    assert sidecar_of(bert, [by_workload, by_pod]) is by_pod  # the pod Prometheus counted
    assert sidecar_of(bert, [sidecar("bert-0")]).pod == "bert-0"  # its name less the ordinal
    assert sidecar_of(bert, [sidecar("bert-0", workload="other")]) is None
    assert sidecar_of(bert, [sidecar("bert-0", namespace="elsewhere")]) is None
    targetless = sidecar("bert-7d9f8b6c5d-q8w2p").model_copy(update={"targets": []})
    assert sidecar_of(bert, [targetless]) is None


def test_one_sidecar_is_asked_once_a_round():
    """Two ledger jobs one sidecar profiles (a workload renamed): one ask, the other waits."""
    fleet = ledger(job("old-name", 5.0, pods=["p-0"]), job("new-name", 4.0, pods=["p-0"]))
    decided = plan(fleet, [sidecar("p-0")], {}, now=NOW, captures_per_h=5)
    assert [j.job for j, _ in decided.ask] == ["old-name"]
    assert decided.waiting[0].detail == "its sidecar is asked for another job this round"
