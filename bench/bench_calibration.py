"""The input pipeline's per-change predictions held against fixes measured on jobs they were not
fitted on.

A parametric family of jobs (bench/calibration/job.py: Python that computes, Python that waits,
Python calling numpy, TF ops; batch, model width, 1 or 2 cores, oneDNN on and off) runs broken,
then once for each fix (the Python moved into TF ops, the map made parallel, a prefetch, and
combinations), each arm as fresh jobs timed by their own clock with no profiler running; the
broken job is also captured through its embedded agent. A pair is that capture's prediction for
the changes made against the steps the two arms' clocks measured. The pairs are split once
(seeded) into a calibration half, on which the model's remaining constants are fitted, and a
held-out half, on which they are reported: per change, the pairs, the median |predicted -
measured| in points, the share of measured savings inside the stated range, and the median
range width.

    .venv/bin/python bench/bench_calibration.py                 # capture the corpus, then report
    .venv/bin/python bench/bench_calibration.py --from-corpus   # report on the committed corpus
    .venv/bin/python bench/bench_calibration.py --steps         # the eager/retracing family

The corpus (bench/calibration/corpus.json) keeps what the model reads of each broken capture,
so the report is recomputed without capturing again; tests/analysis/test_calibration.py holds
the model to the held-out figures."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "calibration" / "corpus.json"
# The corpora captured before the reported one by the job's clock: the code's constants are
# fitted on them whole.
CALIBRATION_CORPORA = [HERE / "calibration" / f"corpus-{name}.json" for name in ("3", "4")]
DEVELOPMENT_CORPORA = [HERE / "calibration" / f"corpus-{name}.json"
                       for name in ("development", "2", "3", "4")]  # fmt: skip
SEED = 48  # issue 48: the split is made once
ACTION_ARGS = {"python": None, "parallel_calls": "--parallel", "prefetch": "--prefetch"}
PYTHON_FIXES = ["python", "parallel_calls", "prefetch", "parallel_calls+prefetch",
                "python+parallel_calls+prefetch"]  # fmt: skip
OTHER_FIXES = ["parallel_calls", "prefetch", "parallel_calls+prefetch"]
# The family: each broken job (sequential, unprefetched) and the fixes tried on it. These are
# the report's corpus (corpus.json), captured once the model's form was frozen; the form was
# developed on other members of the family, whose pairs (and cases) the development corpora
# keep (DEVELOPMENT_CORPORA: each reported on once, then seen), never reported on again.
CASES: list[tuple[dict, list[str]]] = [
    ({"decode": "python-cpu", "rounds": 30, "batch": 32, "width": 128, "cores": 2, "onednn": 1},
     PYTHON_FIXES),
    ({"decode": "python-cpu", "rounds": 50, "batch": 16, "width": 64, "cores": 2}, OTHER_FIXES),
    ({"decode": "python-numpy", "rounds": 10, "batch": 32, "width": 192, "cores": 2},
     PYTHON_FIXES),
    ({"decode": "python-numpy", "rounds": 20, "batch": 24, "width": 64, "cores": 1, "onednn": 0},
     OTHER_FIXES),
    ({"decode": "python-sleep", "sleep-ms": 0.6, "batch": 48, "width": 128, "cores": 2},
     OTHER_FIXES),
    ({"decode": "python-sleep", "sleep-ms": 1.5, "batch": 16, "width": 256, "cores": 2,
      "onednn": 0}, OTHER_FIXES),
    ({"decode": "tf-element", "rounds": 200, "batch": 32, "width": 128, "cores": 2,
      "sequential": True}, OTHER_FIXES),
    ({"decode": "tf-element", "rounds": 100, "batch": 64, "width": 64, "cores": 2,
      "sequential": True, "onednn": 1}, OTHER_FIXES),
    ({"decode": "tf-element", "rounds": 200, "batch": 24, "width": 96, "cores": 1,
      "sequential": True}, OTHER_FIXES),
    ({"decode": "tf", "rounds": 350, "batch": 128, "width": 192, "cores": 2}, OTHER_FIXES),
]  # fmt: skip


# The step family's corpora. Each round fitted the models (`fit_steps`) on the corpora before
# and was reported on a corpus captured after the fit was committed, from new jobs: the eager
# and retracing models on corpus-steps.json, reported on -2; the XLA model on corpus-xla.json,
# reported on -3; the eager model's kernel factor and every range's spread on all four,
# reported on -4.
STEP_DEVELOPMENT_CORPORA = [HERE / "calibration" / f"corpus-{name}.json"
                            for name in ("steps", "steps-2", "xla", "steps-3")]  # fmt: skip
STEP_REPORTED_CORPORA = [HERE / "calibration" / "corpus-steps-4.json"]
# The step family (bench/calibration/step_job.py): each broken job, its fix (a flag of the job)
# and the finding the fix answers. Those of corpus-steps-2.json:
STEP_CASES: list[tuple[dict, str, str]] = [
    ({"mode": "eager", "ops": 25, "batch": 16, "width": 96, "cores": 2}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 50, "batch": 8, "width": 48, "cores": 1, "onednn": 1}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 12, "batch": 64, "width": 384, "cores": 2}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 35, "batch": 32, "width": 128, "cores": 1, "onednn": 0}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 8, "batch": 256, "width": 512, "cores": 2}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 80, "batch": 2, "width": 8, "cores": 1}, "graph",
     "eager_execution"),
    ({"mode": "retrace", "retrace-every": 1, "layers": 2, "width": 512, "batch": 32, "cores": 2},
     "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 3, "layers": 6, "width": 128, "batch": 64, "cores": 2},
     "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 4, "layers": 4, "width": 192, "batch": 32, "cores": 1},
     "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 6, "layers": 5, "width": 384, "batch": 16, "cores": 2,
      "onednn": 1}, "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 2, "layers": 8, "width": 64, "batch": 128, "cores": 1},
     "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 10, "layers": 4, "width": 256, "batch": 64,
      "cores": 2}, "tensor-arg", "retracing"),
]  # fmt: skip
# The XLA family's development cases (corpus-xla.json). An XLA job needs more sizes (half its
# batch) than the shapes it meets in a run (steps / recompile-every), or it stops compiling.
XLA_CASES: list[tuple[dict, str, str]] = [
    ({"mode": "xla", "recompile-every": 1, "layers": 4, "width": 256, "batch": 256, "cores": 2},
     "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 4, "relaxed": True, "layers": 2, "width": 512,
      "batch": 192, "cores": 2}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 8, "layers": 6, "width": 384, "batch": 256, "cores": 1},
     "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 16, "relaxed": True, "layers": 8, "width": 512,
      "batch": 512, "cores": 2, "onednn": 1}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 2, "relaxed": True, "layers": 3, "width": 128,
      "batch": 256, "cores": 1}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 12, "layers": 4, "width": 768, "batch": 128, "cores": 2,
      "onednn": 0}, "padded", "xla_recompilation"),
    # Added after the six above: every call traces and compiles (no steady call), the rest
    # form's cases, of which the six held one.
    ({"mode": "xla", "recompile-every": 1, "layers": 2, "width": 128, "batch": 256, "cores": 1},
     "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 1, "layers": 6, "width": 512, "batch": 320, "cores": 2,
      "onednn": 1}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 1, "layers": 3, "width": 384, "batch": 288, "cores": 2},
     "padded", "xla_recompilation"),
]  # fmt: skip
# Those of corpus-steps-3.json, captured after the XLA model's constants were committed: new
# jobs of all three kinds.
STEP_CASES_3: list[tuple[dict, str, str]] = [
    ({"mode": "eager", "ops": 30, "batch": 24, "width": 80, "cores": 1}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 18, "batch": 48, "width": 192, "cores": 2, "onednn": 1}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 10, "batch": 128, "width": 320, "cores": 1}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 45, "batch": 4, "width": 24, "cores": 2}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 6, "batch": 192, "width": 448, "cores": 2, "onednn": 0}, "graph",
     "eager_execution"),
    ({"mode": "retrace", "retrace-every": 1, "layers": 3, "width": 320, "batch": 48, "cores": 1},
     "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 5, "layers": 7, "width": 160, "batch": 96, "cores": 2},
     "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 8, "layers": 3, "width": 448, "batch": 64, "cores": 2,
      "onednn": 1}, "tensor-arg", "retracing"),
    ({"mode": "xla", "recompile-every": 1, "relaxed": True, "layers": 5, "width": 192,
      "batch": 320, "cores": 2}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 3, "layers": 3, "width": 448, "batch": 224, "cores": 1},
     "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 6, "relaxed": True, "layers": 6, "width": 320,
      "batch": 384, "cores": 2, "onednn": 1}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 10, "layers": 5, "width": 640, "batch": 160, "cores": 2},
     "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 20, "relaxed": True, "layers": 4, "width": 896,
      "batch": 256, "cores": 1, "onednn": 0}, "padded", "xla_recompilation"),
]  # fmt: skip
# Those of corpus-steps-4.json, captured after every step constant and spread was fitted on
# the four corpora before: new jobs of all three kinds.
STEP_CASES_4: list[tuple[dict, str, str]] = [
    ({"mode": "eager", "ops": 22, "batch": 12, "width": 112, "cores": 2}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 14, "batch": 96, "width": 256, "cores": 1, "onednn": 1}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 7, "batch": 160, "width": 416, "cores": 2}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 60, "batch": 6, "width": 40, "cores": 1, "onednn": 0}, "graph",
     "eager_execution"),
    ({"mode": "eager", "ops": 9, "batch": 224, "width": 352, "cores": 1}, "graph",
     "eager_execution"),
    ({"mode": "retrace", "retrace-every": 2, "layers": 5, "width": 224, "batch": 40, "cores": 2},
     "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 7, "layers": 2, "width": 576, "batch": 80, "cores": 1},
     "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 1, "layers": 9, "width": 96, "batch": 24, "cores": 2,
      "onednn": 0}, "tensor-arg", "retracing"),
    ({"mode": "retrace", "retrace-every": 12, "layers": 6, "width": 288, "batch": 56,
      "cores": 2}, "tensor-arg", "retracing"),
    ({"mode": "xla", "recompile-every": 1, "layers": 4, "width": 320, "batch": 352, "cores": 1},
     "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 2, "relaxed": True, "layers": 4, "width": 256,
      "batch": 288, "cores": 2}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 5, "layers": 7, "width": 288, "batch": 200, "cores": 2,
      "onednn": 1}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 9, "relaxed": True, "layers": 3, "width": 704,
      "batch": 192, "cores": 2}, "padded", "xla_recompilation"),
    ({"mode": "xla", "recompile-every": 14, "layers": 5, "width": 512, "batch": 240, "cores": 1},
     "padded", "xla_recompilation"),
]  # fmt: skip
# Each capturable step corpus: where it is kept, and its cases.
STEP_CORPUS_CASES = {"xla": XLA_CASES, "steps-3": STEP_CASES_3, "steps-4": STEP_CASES_4}
# What the eager and tracing models read of a summary; the rest (XProf's tables, the stacks,
# each step) is left out of the corpus.
STEP_SUMMARY_PARTS = ("step_time", "eager", "tf_functions", "process_cpu", "framework")


def job_args(config: dict, fix: str = "") -> list[str]:
    config = dict(config)
    if "python" in fix.split("+"):
        config["decode"] = "tf"
    args = [f"--{k}" if v is True else f"--{k}={v}" for k, v in config.items() if k != "onednn"]
    return args + [ACTION_ARGS[a] for a in fix.split("+") if a and ACTION_ARGS[a]]


def step_job_args(config: dict, fix: str = "") -> list[str]:
    """bench/calibration/step_job.py's arguments for `config` with `fix` (a flag of it)."""
    args = [f"--{k}" if v is True else f"--{k}={v}" for k, v in config.items() if k != "onednn"]
    return args + ([f"--{fix}"] if fix else [])


@contextmanager
def started_job(config: dict, args: list[str], store: Path,
                script: str = "job.py") -> Iterator[tuple[subprocess.Popen, str]]:  # fmt: skip
    """A fresh job of the family (`script` with `args`, oneDNN as `config` says) once it says
    READY: the process, whose stdout then carries its clock, and its agent's URL; its stderr
    goes to `store`/job.log, quoted where it never starts. Killed at the block's end."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if "onednn" in config:
        env["TF_ENABLE_ONEDNN_OPTS"] = str(config["onednn"])
    store.mkdir(parents=True, exist_ok=True)
    log = store / "job.log"
    with log.open("w") as stderr:
        job = subprocess.Popen(
            [sys.executable, str(HERE / "calibration" / script), *args,
             "--store", str(store), "--seconds", "900"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )  # fmt: skip
    try:
        assert job.stdout is not None
        line = next((x for x in job.stdout if x.startswith("READY")), None)
        if line is None:
            raise RuntimeError(f"job {args} did not start: {log.read_text()[-2000:]}")
        yield job, json.loads(line.split(" ", 1)[1])["agent_url"]
    finally:
        job.kill()
        job.wait()


def capture_ready(url: str) -> dict:
    """A 2 s capture through the job's agent, taken again once where the agent dropped it:
    the ready snapshot's JSON."""
    import httpx

    body: dict = {}
    for attempt in range(2):
        try:
            body = httpx.post(f"{url}/profile", timeout=300,
                              params={"duration": "2s", "wait": "true"}).json()  # fmt: skip
        except httpx.HTTPError:
            if attempt:
                raise
            continue
        if body.get("status") == "ready":
            return body
    raise RuntimeError(f"capture through {url}: {body.get('error')}")


def run_job(
    config: dict,
    fix: str,
    store: Path,
    warm_s: float,
    clock_s: float,
    capture: bool,
    script: str = "job.py",
) -> tuple[float, dict | None]:
    """A fresh job of `config` with `fix` applied: its step time by its own clock over
    `clock_s` once warm (no profiler running: what the user's job does), and, where `capture`,
    its snapshot of a 2 s capture taken after that."""
    args = job_args(config, fix) if script == "job.py" else step_job_args(config, fix)
    with started_job(config, args, store, script) as (job, url):
        started = time.monotonic()
        steps, seconds = 0, 0.0
        assert job.stdout is not None
        for line in job.stdout:  # "CLOCK steps seconds", one a second
            if not line.startswith("CLOCK"):
                continue
            if time.monotonic() - started < warm_s:
                continue  # steady steps first
            _, counted, took = line.split()
            steps, seconds = steps + int(counted), seconds + float(took)
            if seconds >= clock_s:
                break
        if not steps:
            raise RuntimeError(f"job {config} {fix} counted no step")
        body = capture_ready(url) if capture else None
    return 1000 * seconds / steps, body


def read_model_inputs(snapshot: dict) -> dict | None:
    """What the input model reads of a broken capture: its input_bound finding's evidence and
    the summary's step time, pipeline and cores; and its reading of the job's Python stacks
    (where tf.data's Python spent its samples), kept for a model that reads them; None where it
    raised no input_bound."""
    finding = next((f for f in snapshot["findings"] if f["rule"] == "input_bound"), None)
    if finding is None:
        return None
    summary = snapshot["summary"]
    return {
        "evidence": finding["evidence"],
        "summary": {
            "step_time": {k: summary["step_time"][k] for k in ("count", "avg_ms")},
            "input_pipeline": {
                k: summary["input_pipeline"][k] for k in ("iterators", "python_in_pipeline")
            },
            "process_cpu": summary.get("process_cpu"),
            "python_stacks": summary.get("python_stacks"),
        },
    }


def build_corpus(warm_s: float, clock_s: float, repeats: int) -> dict:
    """Each arm run `repeats` times, each a fresh job timed by its own clock: its step is their
    mean. The broken arm's first run is also captured: what the model reads."""
    pairs = []
    with tempfile.TemporaryDirectory(prefix="bench-calibration-") as tmp:

        def arm(config: dict, fix: str, name: str) -> tuple[dict | None, list[float]]:
            runs = [run_job(config, fix, Path(tmp) / f"{name}-{r}", warm_s, clock_s,
                            capture=(fix == "" and r == 0)) for r in range(repeats)]  # fmt: skip
            return runs[0][1], [step for step, _ in runs]

        for n, (config, fixes) in enumerate(CASES):
            broken, before_runs = arm(config, "", f"b{n}")
            assert broken is not None
            inputs = read_model_inputs(broken)
            before = statistics.fmean(before_runs)
            captured = broken["summary"]["step_time"]["avg_ms"]
            print(f"{config}: {before_runs} ms by the job's clock, {captured} ms captured, "
                  f"input_bound: {inputs is not None}", flush=True)  # fmt: skip
            if inputs is None:
                continue
            for m, fix in enumerate(fixes):
                _, after_runs = arm(config, fix, f"f{n}-{m}")
                after = statistics.fmean(after_runs)
                pairs.append({"case": config, "fix": fix, "step_ms_before": before,
                              "step_ms_after": after, "step_ms_before_runs": before_runs,
                              "step_ms_after_runs": after_runs, "step_ms_captured": captured,
                              **inputs})  # fmt: skip
                print(f"  {fix}: {after_runs} ms ({1 - after / before:+.0%} saved)", flush=True)
    return {"machine": f"{os.cpu_count()} cores {platform.machine()} {platform.processor()}",
            "repeats": repeats, "measured_by": "the job's own clock", "warm_s": warm_s,
            "clock_s": clock_s, "pairs": pairs}  # fmt: skip


def build_step_corpus(cases: list[tuple[dict, str, str]], warm_s: float, clock_s: float,
                      repeats: int) -> dict:  # fmt: skip
    """The step family's pairs, each arm `repeats` fresh jobs timed by their own clock; the
    broken arm's first also captured: its finding (with the evidence the model reads) and the
    summary's parts the model reads."""
    pairs = []
    with tempfile.TemporaryDirectory(prefix="bench-calibration-steps-") as tmp:
        for n, (config, fix, rule) in enumerate(cases):
            arms = {}
            for arm_fix in ("", fix):
                runs = [run_job(config, arm_fix, Path(tmp) / f"s{n}-{arm_fix}-{r}", warm_s,
                                clock_s, capture=(arm_fix == "" and r == 0),
                                script="step_job.py") for r in range(repeats)]  # fmt: skip
                arms[arm_fix] = runs
            broken = arms[""][0][1]
            assert broken is not None
            before_runs = [step for step, _ in arms[""]]
            after_runs = [step for step, _ in arms[fix]]
            finding = next((f for f in broken["findings"] if f["rule"] == rule), None)
            before, after = statistics.fmean(before_runs), statistics.fmean(after_runs)
            print(f"{config} {fix}: {before_runs} -> {after_runs} ms by the job's clock "
                  f"({1 - after / before:+.0%} saved), {rule}: {finding is not None}",
                  flush=True)  # fmt: skip
            if finding is None:
                continue
            summary = broken["summary"]
            kept = {k: summary.get(k) for k in STEP_SUMMARY_PARTS}
            kept["step_time"] = {k: v for k, v in summary["step_time"].items() if k != "steps"}
            pairs.append({"case": config, "fix": fix, "rule": rule, "step_ms_before": before,
                          "step_ms_after": after, "step_ms_before_runs": before_runs,
                          "step_ms_after_runs": after_runs,
                          "step_ms_captured": summary["step_time"]["avg_ms"],
                          "finding": {k: finding[k] for k in ("rule", "severity", "title",
                                                              "evidence", "impact_share")},
                          "summary": kept})  # fmt: skip
    return {"machine": f"{os.cpu_count()} cores {platform.machine()} {platform.processor()}",
            "repeats": repeats, "measured_by": "the job's own clock", "warm_s": warm_s,
            "clock_s": clock_s, "pairs": pairs}  # fmt: skip


@dataclass
class Held:
    """One pair against the model as it stands: predicted point and range, measured."""

    fix: str
    measured: float
    point: float
    low: float
    high: float

    @property
    def inside(self) -> bool:
        return self.low <= self.measured <= self.high


def predict(pair: dict) -> Held:
    from profiler_service.analysis import input_impact
    from profiler_service.analysis.input_impact import input_wait, modelled_actions
    from profiler_service.analysis.models import Finding, Severity, Summary

    finding = Finding(rule="input_bound", severity=Severity.CRITICAL, title="",
                      evidence=pair["evidence"])  # fmt: skip
    impact = input_wait(finding, Summary.model_validate(pair["summary"]))
    # The changes made that the model predicts (a fix the pipeline did not lack is no change).
    done = [a for a in modelled_actions(pair["evidence"]["pipeline_lacks"])
            if a in pair["fix"].split("+")]  # fmt: skip
    measured = 1 - pair["step_ms_after"] / pair["step_ms_before"]
    if not done:  # the pipeline had it already: the model says the change changes nothing
        return Held(pair["fix"], measured, 0.0, *input_impact.SAVING_SPREAD)
    action = impact.action("+".join(done))
    if action is None:
        raise ValueError(f"no prediction for {pair['fix']} ({done})")
    return Held(pair["fix"], measured, action.saving_share, *action.saving_range)


def predict_step(pair: dict) -> Held:
    """A step-family pair against its finding's model as it stands."""
    from profiler_service.analysis.findings import estimate
    from profiler_service.analysis.models import Finding, Summary

    impact = estimate(Finding.model_validate(pair["finding"]),
                      Summary.model_validate(pair["summary"]))  # fmt: skip
    measured = 1 - pair["step_ms_after"] / pair["step_ms_before"]
    return Held(f"{pair['rule']}: {pair['fix']}", measured, impact.saving_share,
                *impact.saving_range)  # fmt: skip


def split(pairs: list[dict]) -> tuple[list[dict], list[dict]]:
    """Half to fit on, half to report on, by one seeded shuffle."""
    order = list(range(len(pairs)))
    random.Random(SEED).shuffle(order)
    half = len(pairs) // 2
    return [pairs[i] for i in order[:half]], [pairs[i] for i in order[half:]]


@contextmanager
def constants(**values):
    """The models' constants set to `values` for the block (each in the module that holds it)."""
    from profiler_service.analysis import input_impact
    from profiler_service.analysis.findings import eager, tensorflow

    home = {name: next(m for m in (input_impact, eager, tensorflow) if hasattr(m, name))
            for name in values}  # fmt: skip
    kept = {name: getattr(home[name], name) for name in values}
    for name, value in values.items():
        setattr(home[name], name, value)
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(home[name], name, value)


def spread80(residuals: list[float]) -> tuple[float, float]:
    """Split conformal: of n residuals (measured - predicted), the floor((n + 1) 0.1)-th and
    ceil((n + 1) 0.9)-th smallest bound a new pair's with 80 % probability (the pairs
    exchangeable)."""
    ordered, n = sorted(residuals), len(residuals)
    low = ordered[max(0, math.floor((n + 1) * 0.1) - 1)]
    high = ordered[min(n - 1, math.ceil((n + 1) * 0.9) - 1)]
    return round(low, 3), round(high, 3)


def fit(pairs: list[dict]) -> dict:
    """The constants this family can fit, on the pairs given: the share of the step's compute
    that waited for the GIL (by grid: least median error on the pairs that moved computing
    Python into TF ops), the GIL convoy's share (the same, on the pairs whose point it moves:
    computing Python run beside the loop), then the spread of measured savings about the
    points (the range that holds 80 % of them)."""
    grid = [i / 20 for i in range(0, 21)]

    def best(name: str, chosen: list[dict], default: float, **fixed) -> float:
        def error(value: float) -> float:
            with constants(**fixed, **{name: value}):
                held = [predict(p) for p in chosen]
            return statistics.median(abs(h.point - h.measured) for h in held)

        return min(grid, key=error) if chosen else default

    python = [p for p in pairs if "python" in p["fix"].split("+")]
    gil = best("GIL_WAIT_SHARE", python, 0.5)

    def moved_by_convoy(pair: dict) -> bool:
        with constants(GIL_CONVOY_SHARE=0.0):
            without = predict(pair).point
        with constants(GIL_CONVOY_SHARE=1.0):
            return predict(pair).point != without

    convoy = best("GIL_CONVOY_SHARE", [p for p in pairs if moved_by_convoy(p)], 0.0,
                  GIL_WAIT_SHARE=gil)  # fmt: skip
    with constants(GIL_WAIT_SHARE=gil, GIL_CONVOY_SHARE=convoy, SAVING_SPREAD=(0.0, 0.0)):
        residuals = [predict(p).measured - predict(p).point for p in pairs]
    return {"GIL_WAIT_SHARE": gil, "GIL_CONVOY_SHARE": convoy,
            "SAVING_SPREAD": spread80(residuals)}  # fmt: skip


# A pair whose steady calls take less of the step than this says nothing of their cost: one
# point of error in its saving moves the cost it gives by more than 0.2.
STEADY_SHARE_TO_FIT = 0.05


def fit_steps(pairs: list[dict]) -> dict:
    """The step family's constants, from each pair's own figures. Eager: what a graph keeps of
    the kernels' time and the eager wrapper's cost an op, by least squares on each pair's step
    after the fix (by the job's clock, scaled to the captured step) against its kernels' time
    and its ops a step. Retracing: the median share of a retraced step's rest (beside the
    marked tracing) that one trace removed. XLA: the median cost of one padded shape against
    the steady calls (the calls' share less the saving, over their steady share; where they
    take `STEADY_SHARE_TO_FIT` of the step) and, where no call was steady, the median share of
    the rest one shape removed (beside the marked compiling and tracing). Then each model's
    spread of measured - predicted savings over its pairs that holds 80 % of them."""
    eager_rows, rests, xla_rests, steady_costs = [], [], [], []
    for pair in pairs:
        kept = pair["step_ms_after"] / pair["step_ms_before"]
        eager = pair["summary"].get("eager")
        if pair["rule"] == "eager_execution" and eager:
            captured = pair["step_ms_captured"]
            kernels = eager["kernel_ms_per_step"] * captured / eager["step_ms"]
            eager_rows.append((kernels, eager["ops_per_step"], kept * captured))
        elif pair["rule"] == "retracing":
            marked = pair["finding"]["impact_share"]
            rests.append((1 - kept - marked) / (1 - marked))
        elif pair["rule"] == "xla_recompilation":
            evidence = pair["finding"]["evidence"]
            marked = min(0.999, pair["finding"]["impact_share"] + evidence["tracing_share"])
            if not evidence.get("steady_share"):  # the model's rest form
                xla_rests.append((1 - kept - marked) / (1 - marked))
            elif evidence["steady_share"] >= STEADY_SHARE_TO_FIT:
                steady_costs.append((evidence["calls_share"] - (1 - kept))
                                    / evidence["steady_share"])  # fmt: skip
    # after = K kernels - O ops: the normal equations of the two unknowns
    kk = sum(k * k for k, _, _ in eager_rows)
    ko = sum(k * o for k, o, _ in eager_rows)
    oo = sum(o * o for _, o, _ in eager_rows)
    ky = sum(k * y for k, _, y in eager_rows)
    oy = sum(o * y for _, o, y in eager_rows)
    det = kk * oo - ko * ko
    fitted = {
        "EAGER_KERNEL_KEPT": round((ky * oo - oy * ko) / det, 3),
        "EAGER_OP_OVERHEAD_MS": round((ky * ko - oy * kk) / det, 5),
        "RETRACE_REST_REMOVED": round(statistics.median(rests), 3),
        "XLA_STEADY_COST": round(statistics.median(steady_costs), 3),
        "XLA_REST_REMOVED": round(statistics.median(xla_rests), 3),
    }
    spreads = {"eager_execution": "EAGER_SAVING_SPREAD", "retracing": "RETRACE_SAVING_SPREAD",
               "xla_recompilation": "XLA_SAVING_SPREAD"}  # fmt: skip
    with constants(**fitted, **{name: (0.0, 0.0) for name in spreads.values()}):
        held = [(pair["rule"], predict_step(pair)) for pair in pairs]
    for rule_name, name in spreads.items():
        fitted[name] = spread80([h.measured - h.point for r, h in held if r == rule_name])
    return fitted


def report(pairs: list[dict], title: str, judge=None) -> dict[str, dict]:
    held = [(judge or predict)(p) for p in pairs]
    print(f"\n{title}: {len(held)} pairs")
    print(f"{'change':<34}{'pairs':>6}{'median |err|':>14}{'inside':>8}{'width':>8}")
    rows = {}
    for fix in [*sorted({h.fix for h in held}), "all"]:
        chosen = [h for h in held if fix in ("all", h.fix)]
        errors = [abs(h.point - h.measured) for h in chosen]
        row = {
            "pairs": len(chosen),
            "median_error_points": 100 * statistics.median(errors),
            "inside_share": statistics.fmean(h.inside for h in chosen),
            "median_width_points": 100 * statistics.median(h.high - h.low for h in chosen),
        }
        rows[fix] = row
        print(f"{fix:<34}{row['pairs']:>6}{row['median_error_points']:>13.1f} "
              f"{row['inside_share']:>7.0%}{row['median_width_points']:>8.1f}")  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-corpus", action="store_true", help="report on corpus.json")
    parser.add_argument("--warm-s", type=float, default=4.0, help="training before the clock")
    parser.add_argument("--clock-s", type=float, default=6.0, help="steps timed by the job")
    parser.add_argument("--repeats", type=int, default=2, help="fresh jobs per arm")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="where the corpus is kept")
    parser.add_argument("--steps", choices=sorted(STEP_CORPUS_CASES),
                        help="capture this step-family corpus (eager, tracing, XLA)")  # fmt: skip
    args = parser.parse_args()
    if args.steps:
        steps = build_step_corpus(STEP_CORPUS_CASES[args.steps], args.warm_s, args.clock_s,
                                  args.repeats)  # fmt: skip
        path = HERE / "calibration" / f"corpus-{args.steps}.json"
        path.write_text(json.dumps(steps, indent=1) + "\n")
        return report_steps()
    if args.from_corpus:
        corpus = json.loads(args.corpus.read_text())
    else:
        corpus = build_corpus(args.warm_s, args.clock_s, args.repeats)
        args.corpus.write_text(json.dumps(corpus, indent=1) + "\n")
    print(f"{len(corpus['pairs'])} pairs measured on {corpus['machine']}")
    # The code's constants: fitted on the whole corpora before (their 72 pairs put the spread's
    # bounds at the 7th and 66th residuals, not at the extremes), reported on all of this one.
    previous = [p for path in CALIBRATION_CORPORA for p in json.loads(path.read_text())["pairs"]]
    fitted = fit(previous)
    names = " and ".join(path.name for path in CALIBRATION_CORPORA)
    print(f"fitted on {names} ({len(previous)} pairs): {fitted}")
    with constants(**fitted):
        rows = report(corpus["pairs"], f"all of {args.corpus.name} (reported)")
    # The same corpus split once (seeded), fitted on one half, reported on the other.
    calibration, held_out = split(corpus["pairs"])
    halves = fit(calibration)
    print(f"\nsplit once (seed {SEED}), fitted on the calibration half: {halves}")
    with constants(**halves):
        report(held_out, "held-out half (reported)")
    record_aims("calibration held-out", rows["all"])
    report_steps()
    return 0


def step_pairs(paths: list[Path]) -> list[dict]:
    """The pairs of those step corpora that exist."""
    return [p for path in paths if path.exists() for p in json.loads(path.read_text())["pairs"]]


def report_steps() -> int:
    """The eager, tracing and XLA models on the step family: their constants fitted on the
    development corpora, all of each reported one reported."""
    names = " and ".join(path.name for path in STEP_DEVELOPMENT_CORPORA if path.exists())
    print(f"\nfitted on {names}: {fit_steps(step_pairs(STEP_DEVELOPMENT_CORPORA))}")
    for path in STEP_REPORTED_CORPORA:
        if not path.exists():
            continue
        corpus = json.loads(path.read_text())
        print(f"{len(corpus['pairs'])} step-family pairs measured on {corpus['machine']}")
        rows = report(corpus["pairs"], f"all of {path.name} (reported)", predict_step)
        record_aims(f"calibration, {path.stem}", rows["all"])
    return 0


def record_aims(name: str, whole: dict) -> None:
    """A report's figures over all its pairs, against issue 48's aims."""
    from bench_common import record

    record(f"{name}: median |predicted - measured|", whole["median_error_points"],
           "<= 10 points", whole["median_error_points"] <= 10, "points")  # fmt: skip
    record(f"{name}: measured inside the range", 100 * whole["inside_share"],
           "80 % +- 10", abs(whole["inside_share"] - 0.8) <= 0.1, "%")  # fmt: skip
    record(f"{name}: median range width", whole["median_width_points"],
           "<= 30 points", whole["median_width_points"] <= 30, "points")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
