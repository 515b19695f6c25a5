"""The ledger's parts that need no hub: pod names to jobs, prices by GPU model, windows, and
what one real GPU capture says about its idle time (tests/fixtures/gpu-captures)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from profiler_service.analysis.gpu_waste import IdleCause, capture_waste
from profiler_service.analysis.models import Summary
from profiler_service.analysis.summary import analyse_run
from profiler_service.config import LedgerSettings
from profiler_service.durations import format_window, parse_window
from profiler_service.errors import InvalidDuration
from profiler_service.hub.ledger import job_of_pod, price_of

T4_INPUT = (
    Path(__file__).resolve().parents[1]
    / "fixtures/gpu-captures/mholmeslinder-semi-supervised-cv/2020_12_21_16_42_56"
)


@pytest.mark.parametrize(
    ("pod", "job"),
    [
        ("trainer-7d9f8b6c5d-x2x4z", "trainer"),  # a Deployment's
        ("train-0042-k7q2p", "train-0042"),  # a Job's: its name's digits stay
        ("bert-0", "bert"),  # a StatefulSet's
        ("train-3-k7q2p", "train-3"),  # an indexed Job's: the index stays
        ("trainer-small", "trainer-small"),  # vowels: not a generated suffix
        ("solo", "solo"),
    ],
)
def test_a_pod_belongs_to_the_job_its_controller_named(pod, job):
    assert job_of_pod(pod) == job


def test_a_gpu_hour_s_price_is_the_longest_key_its_model_contains():
    prices = LedgerSettings(hub_gpu_hour_prices="A100=2.9,A100-SXM4-80GB=3.4,H100=4.5,*=2")
    p = prices.gpu_hour_prices
    assert price_of("NVIDIA A100-SXM4-80GB", p) == 3.4
    assert price_of("NVIDIA A100-PCIE-40GB", p) == 2.9
    assert price_of("nvidia h100 80gb hbm3", p) == 4.5
    assert price_of("Tesla T4", p) == 2 and price_of(None, p) == 2
    assert price_of("Tesla T4", {"A100": 2.9}) is None
    assert LedgerSettings(hub_gpu_hour_prices='{"L4": 0.8}').gpu_hour_prices == {"L4": 0.8}


@pytest.mark.parametrize("bad", ["A100", "A100=cheap", "A100=-1", "=2"])
def test_prices_that_are_not_model_equals_price_are_refused(bad):
    with pytest.raises(ValidationError):
        LedgerSettings(hub_gpu_hour_prices=bad)


def test_windows_as_people_write_them():
    assert parse_window("24h", min_s=3600, max_s=90 * 86400) == 86400
    assert parse_window("2w", min_s=3600, max_s=90 * 86400) == 14 * 86400
    assert format_window(7 * 86400) == "7d" and format_window(5400) == "90m"
    for bad in ("7x", "", "30m", "100d"):
        with pytest.raises(InvalidDuration):
            parse_window(bad, min_s=3600, max_s=90 * 86400)


def test_a_gpu_capture_s_idle_time_by_cause_and_its_fix(tmp_path):
    """TF's own verdict on this T4 run was 62 % input: its idle time is input's, and its fix
    is the input-bound finding's."""
    for path in T4_INPUT.glob("*.xplane.pb"):
        shutil.copy(path, tmp_path / path.name)
    result = analyse_run(tmp_path)
    waste = capture_waste(result.summary, result.findings)
    assert waste is not None and waste.gpus == 1 and waste.model == "Tesla T4"
    assert sum(waste.idle_by_cause.values()) == pytest.approx(1, abs=1e-3)
    assert max(waste.idle_by_cause, key=waste.idle_by_cause.get) == IdleCause.INPUT
    assert waste.idle_by_cause[IdleCause.INPUT] > 0.9
    assert 0.5 < waste.idle_share < 0.8
    assert waste.rule == "input_bound" and 0 < waste.saving_share < 1


def test_a_capture_without_gpu_work_explains_no_gpu_hour():
    assert capture_waste(Summary(), []) is None
    assert capture_waste(None, []) is None
