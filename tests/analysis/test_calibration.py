"""The input model held to the calibration corpora (bench/calibration/): fix pairs measured on
real jobs of a parametric family. Its constants are fitted on the corpora before
(corpus-3.json and corpus-4.json, whole) and reported on another, captured after the model's
form was frozen (corpus.json, whole; it was developed on the development corpora, those among
them, never on it). The code carries
the fit, and the reported corpus's figures are what docs/findings.md states: a change to the
model that makes them worse fails here. The reported corpus split once (seeded) into halves is
printed beside it by bench/bench_calibration.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import bench_calibration as calibration  # noqa: E402

from profiler_service.analysis import input_impact  # noqa: E402
from profiler_service.analysis.findings import eager, tensorflow  # noqa: E402

CORPUS = json.loads(calibration.CORPUS.read_text())
CALIBRATION = [
    p for path in calibration.CALIBRATION_CORPORA for p in json.loads(path.read_text())["pairs"]
]
HELD_OUT = CORPUS["pairs"]


def test_the_corpora_are_large_enough_and_apart():
    assert len(CALIBRATION) >= 30 and len(HELD_OUT) >= 30
    # No job of the reported corpus is one the constants were fitted on.
    assert {json.dumps(p["case"], sort_keys=True) for p in CALIBRATION}.isdisjoint(
        json.dumps(p["case"], sort_keys=True) for p in HELD_OUT
    )
    # Every change the model predicts is measured in both.
    for half in (CALIBRATION, HELD_OUT):
        assert {"python", "parallel_calls", "prefetch"} <= {
            a for p in half for a in p["fix"].split("+")
        }


def test_the_code_carries_the_constants_fitted_on_the_calibration_corpus():
    fitted = calibration.fit(CALIBRATION)
    assert fitted == {
        "GIL_WAIT_SHARE": pytest.approx(input_impact.GIL_WAIT_SHARE),
        "GIL_CONVOY_SHARE": pytest.approx(input_impact.GIL_CONVOY_SHARE),
        "SAVING_SPREAD": pytest.approx(input_impact.SAVING_SPREAD),
    }


def test_the_reported_corpus_is_not_the_one_the_model_was_developed_on():
    seen = {
        json.dumps(p["case"], sort_keys=True)
        for path in calibration.DEVELOPMENT_CORPORA
        for p in json.loads(path.read_text())["pairs"]
    }
    assert seen.isdisjoint(json.dumps(p["case"], sort_keys=True) for p in CORPUS["pairs"])
    # Each arm of the reported corpus is the mean of fresh jobs, each listed, timed by the
    # job's own clock (no profiler running).
    assert CORPUS["measured_by"] == "the job's own clock"
    assert all(len(p["step_ms_after_runs"]) >= 2 for p in CORPUS["pairs"])


def test_the_reported_corpus_holds_what_the_docs_state():
    rows = calibration.report(HELD_OUT, "reported corpus")
    whole = rows["all"]
    assert whole["median_error_points"] <= HELD_OUT_MEDIAN_ERROR_POINTS
    assert whole["inside_share"] >= HELD_OUT_INSIDE_SHARE
    assert whole["median_width_points"] <= HELD_OUT_MEDIAN_WIDTH_POINTS


# What the reported corpus measured with the code's constants (docs/findings.md's table: 4.6
# points, 79 %, 21.2 points; the aims: 10 points, 80 % +- 10 and 30 points).
HELD_OUT_MEDIAN_ERROR_POINTS = 4.7
HELD_OUT_INSIDE_SHARE = 0.79
HELD_OUT_MEDIAN_WIDTH_POINTS = 21.3


STEPS_DEVELOPMENT = calibration.step_pairs(calibration.STEP_DEVELOPMENT_CORPORA)
STEPS_REPORTED = {path.stem: json.loads(path.read_text())
                  for path in calibration.STEP_REPORTED_CORPORA if path.exists()}  # fmt: skip


def counts(pairs: list[dict]) -> dict[str, int]:
    rules = [p["rule"] for p in pairs]
    return {rule: rules.count(rule) for rule in set(rules)}


def test_the_step_family_measures_each_rule_by_the_jobs_clock():
    """The eager, retracing and XLA models against fixes of jobs they were not fitted on: a
    graph for eager ops, a tensor argument for retracing, one padded shape for XLA."""
    assert counts(STEPS_DEVELOPMENT) == {
        "eager_execution": 17,
        "retracing": 15,
        "xla_recompilation": 14,
    }
    developed = {json.dumps(p["case"], sort_keys=True) for p in STEPS_DEVELOPMENT}
    for corpus in STEPS_REPORTED.values():
        assert corpus["measured_by"] == "the job's own clock"
        assert all(len(p["step_ms_after_runs"]) >= 2 for p in corpus["pairs"])
        assert developed.isdisjoint(json.dumps(p["case"], sort_keys=True)
                                    for p in corpus["pairs"])  # fmt: skip


def test_the_code_carries_the_step_constants_fitted_on_the_development_corpora():
    names = ["EAGER_KERNEL_KEPT", "EAGER_OP_OVERHEAD_MS", "EAGER_SAVING_SPREAD"]
    got = calibration.fit_steps(STEPS_DEVELOPMENT)
    assert set(got) == {*names, "RETRACE_REST_REMOVED", "RETRACE_SAVING_SPREAD",
                        "XLA_STEADY_COST", "XLA_REST_REMOVED", "XLA_SAVING_SPREAD"}  # fmt: skip
    for name, value in got.items():
        module = eager if name in names else tensorflow
        assert getattr(module, name) == pytest.approx(value), name


@pytest.mark.parametrize("name", sorted(STEPS_REPORTED))
def test_the_step_models_hold_what_the_docs_state(name):
    rows = calibration.report(STEPS_REPORTED[name]["pairs"], name, calibration.predict_step)
    most_error, least_inside, most_width = STEPS_HELD[name]
    whole = rows["all"]
    assert whole["median_error_points"] <= most_error
    assert whole["inside_share"] >= least_inside
    assert whole["median_width_points"] <= most_width


# What the reported step corpora measured with the constants fitted on the development ones
# (docs/findings.md; the aims: 10 points, 80 % +- 10, 30 points): the median error and width in
# points (a tenth above the docs' rounding), the share inside.
STEPS_HELD = {"corpus-steps-4": (5.2, 0.78, 19.8)}
