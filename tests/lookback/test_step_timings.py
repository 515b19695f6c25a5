"""Where a sidecar's step timings come from, and what its lead-up and capture cost say when it
has none: the step markers count inside the job's process, which a sidecar cannot see into, so
it reads the job's own `/metrics` (PROFILER_JOB_METRICS_URL); without it the notes say so and
how to get them, not that the job marks no steps or that the sampler just started."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from helpers import free_port
from prometheus_client import CollectorRegistry, start_http_server

from profiler_service.capture.cost import capture_cost
from profiler_service.config import Settings
from profiler_service.exporters.gpu_collector import GpuCollector
from profiler_service.exporters.job_metrics import job_registry
from profiler_service.exporters.tf_collector import TFMemoryCollector
from profiler_service.lookback.models import LeadUp, PendingLeadUp, Series
from profiler_service.lookback.sampler import NEVER_SAMPLED
from profiler_service.lookback.sources import SIDECAR_STEPS_HINT, JobMetricsSource
from profiler_service.probes.steps import StepStats
from profiler_service.service import build_sampler

T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def served():
    """A job's `/metrics` (the registry `start_job_metrics_server` serves) over its own steps."""
    started = []

    def serve(registry: CollectorRegistry) -> str:
        port = free_port()
        server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
        started.append((server, thread))
        return f"http://127.0.0.1:{port}/metrics"

    yield serve
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(5)


def sidecar_sampler(tmp_path, clock, **settings):
    settings = Settings(store=tmp_path, targets="grpc://127.0.0.1:9", **settings)
    sampler = build_sampler(settings, GpuCollector(), TFMemoryCollector())
    assert sampler is not None
    sampler.clock = clock
    return sampler


def test_a_sidecar_without_the_job_s_metrics_says_so_and_how_not_that_it_just_started(tmp_path):
    now = [T0.timestamp()]
    sampler = sidecar_sampler(tmp_path, lambda: now[0])
    for _ in range(180):  # three minutes up
        sampler.sample()
        now[0] += 1.0
    lead_up = sampler.lead_up(T0 + timedelta(seconds=60), T0 + timedelta(seconds=175))
    assert not any("just started" in note for note in lead_up.notes), lead_up.notes
    assert lead_up.missing["step_time_ms"] == SIDECAR_STEPS_HINT
    notes = " ".join(lead_up.notes)
    assert "PROFILER_JOB_METRICS_URL" in notes
    if not lead_up.series:  # a CPU host: nothing at all was read, and each reason is given
        assert notes.startswith("the sampler read nothing about the job: ")
        assert "PROFILER_WATCH_PROCESS" in notes and "no GPU readings" in notes

    cost = capture_cost(lead_up, T0 + timedelta(seconds=170), T0 + timedelta(seconds=172))
    assert cost.ratio is None
    assert cost.note == f"unknown: {SIDECAR_STEPS_HINT}"
    assert "reports no step timings" not in cost.note


def test_a_sampler_that_never_sampled_says_so_and_where_it_runs(tmp_path):
    sampler = sidecar_sampler(tmp_path, lambda: T0.timestamp())
    lead_up = sampler.lead_up(T0 - timedelta(seconds=300), T0)
    assert lead_up.notes == [f"no samples in the look-back window: {NEVER_SAMPLED}"]
    assert lead_up.missing == {"step_time_ms": NEVER_SAMPLED}  # the cost says it, not a hint


def test_the_sidecar_reads_step_timings_from_the_job_s_metrics(tmp_path, served):
    steps = StepStats()
    url = served(job_registry(steps=steps))
    now = [T0.timestamp()]
    sampler = sidecar_sampler(tmp_path, lambda: now[0], job_metrics_url=url)
    sampler.sample()  # the counters' first reading: nothing to difference yet
    for second in range(12):
        traced = second >= 10  # 10 steps of 20 ms a second; 8 of 25 ms while traced
        for _ in range(8 if traced else 10):
            steps.observe(0.025 if traced else 0.020)
        now[0] += 1.0
        sampler.sample()
    lead_up = sampler.lead_up(T0 - timedelta(seconds=60), T0 + timedelta(seconds=12))
    series = {s.name: s for s in lead_up.series}
    assert series["step_time_ms"].source == "job"
    assert [v for _, v in series["step_time_ms"].points] == pytest.approx([20.0] * 10 + [25.0] * 2)
    assert [v for _, v in series["steps_per_s"].points] == [10.0] * 10 + [8.0] * 2
    assert "step_time_ms" not in lead_up.missing and lead_up.notes == []

    cost = capture_cost(lead_up, T0 + timedelta(seconds=10), T0 + timedelta(seconds=12))
    assert cost.source == "job"
    # A step's wall time: 1 s over 10 steps before, over 8 while traced.
    assert (cost.step_ms_before, cost.step_ms_during, cost.ratio) == (100.0, 125.0, 1.25)
    assert (cost.steps_before, cost.steps_during) == (100, 16)


def test_the_job_s_metrics_unanswered_or_without_steps_are_named(tmp_path, served):
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    source = JobMetricsSource(dead, timeout_s=1.0)
    assert source.read() == {}
    assert source.silence().startswith(f"the job's metrics at {dead} did not answer (")

    no_steps = served(CollectorRegistry())  # a metrics port, but no step marker in the job
    source = JobMetricsSource(no_steps)
    assert source.read() == {}
    assert "count no step" in source.silence() and "ProfilerStepCallback" in source.silence()


def test_prometheus_s_step_time_fills_what_the_sampler_missed():
    now = LeadUp(
        start=T0 - timedelta(minutes=5),
        end=T0,
        notes=[SIDECAR_STEPS_HINT],
        missing={"step_time_ms": SIDECAR_STEPS_HINT},
    )
    step = Series(name="step_time_ms", source="prometheus", points=[(T0.timestamp() - 5, 20.0)])
    lead_up = PendingLeadUp(now, lambda: ([step], []), deadline_s=5).result()
    assert lead_up.missing == {} and lead_up.notes == []
