"""The input model held to the calibration corpus (bench/calibration/corpus.json): fix pairs
measured on real jobs of a parametric family, captured after the model's form was frozen (it
was developed on the development corpora, corpus-development.json and corpus-2.json), split
once into a half the model's constants are fitted on and a half they are reported on
(bench/bench_calibration.py). The code carries the fit, and the held-out half's figures are
what docs/findings.md states: a change to the model that makes them worse fails here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import bench_calibration as calibration  # noqa: E402

from profiler_service.analysis import input_impact  # noqa: E402

CORPUS = json.loads(calibration.CORPUS.read_text())
CALIBRATION, HELD_OUT = calibration.split(CORPUS["pairs"])


def test_the_corpus_is_large_enough_and_split_once():
    assert len(CORPUS["pairs"]) >= 30
    assert {json.dumps(p, sort_keys=True) for p in CALIBRATION}.isdisjoint(
        json.dumps(p, sort_keys=True) for p in HELD_OUT
    )
    # Every change the model predicts is measured in both halves.
    for half in (CALIBRATION, HELD_OUT):
        assert {"python", "parallel_calls", "prefetch"} <= {
            a for p in half for a in p["fix"].split("+")
        }


def test_the_code_carries_the_constants_fitted_on_the_calibration_half():
    fitted = calibration.fit(CALIBRATION)
    assert fitted == {
        "GIL_WAIT_SHARE": pytest.approx(input_impact.GIL_WAIT_SHARE),
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


def test_the_held_out_half_holds_what_the_docs_state():
    rows = calibration.report(HELD_OUT, "held-out half")
    whole = rows["all"]
    assert whole["median_error_points"] <= HELD_OUT_MEDIAN_ERROR_POINTS
    assert whole["inside_share"] >= HELD_OUT_INSIDE_SHARE
    assert whole["median_width_points"] <= HELD_OUT_MEDIAN_WIDTH_POINTS


# What the held-out half measured with the code's constants (docs/findings.md's table: 5.4
# points, 95 %, 51.2 points; the aims: 10 points, 80 % +- 10 and 30 points, the last two not
# met: the range is wider than it needs to hold 80 %).
HELD_OUT_MEDIAN_ERROR_POINTS = 5.5
HELD_OUT_INSIDE_SHARE = 0.95
HELD_OUT_MEDIAN_WIDTH_POINTS = 51.5
