"""`profiler-service analyze` over a folder of many runs: one row a run, TensorFlow's verdict at
capture time beside ours, on real GPU captures (tests/fixtures/gpu-captures, README.md there)
and a real CPU capture; XProf's converters are real."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import capture_once, run_cli

from profiler_service.analysis.gpu_models import describe_devices
from profiler_service.analysis.models import (
    GpuActivity,
    GpuDevice,
    GpuKernels,
    InputBound,
    Summary,
    Utilisation,
)
from profiler_service.analysis.runner.corpus import find_runs, read_tensorflow_verdict, short_name

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-captures"
AOBERAI = FIXTURES / "aoberai-chess-engine"
# Fixture folder -> (its run's short name in a logdir tree, TF's verdict then: word, input %,
# bottleneck, and its step time in ms, which XProf's step time now should match).
RUNS = {
    "logs__fit__20210616-112155__train__2021_06_16_11_22_03": (
        "logs/fit/20210616-112155/train/2021_06_16_11_22_03",
        ("highly", 41.6, "host"),
        40.98,
    ),
    "logs__fit__20210615-181006__train__2021_06_15_18_10_10": (
        "logs/fit/20210615-181006/train/2021_06_15_18_10_10",
        ("moderately", 7.3, "both"),
        10.92,
    ),
    "logs__fit__20210616-014419__train__2021_06_16_01_44_30": (
        "logs/fit/20210616-014419/train/2021_06_16_01_44_30",
        ("potentially", 0.0, "both"),
        43.71,
    ),
}
TIMES = "\N{MULTIPLICATION SIGN}"
RTX_2060 = f"1{TIMES}GPU RTX 2060 (7.5)"  # the model, read from the GPU plane's figures
ROW_FIELDS = {
    "run",
    "path",
    "devices",
    "steps",
    "step_time_ms",
    "ours",
    "then_by_tensorflow",
    "analysis_s",
    "error",
}


def as_logdir_run(root: Path, folder: str) -> Path:
    """Where TensorBoard wrote the run: `logs__fit__X__train__RUN` ->
    `logs/fit/X/train/plugins/profile/RUN`; a copy of the fixture there, read-only as a
    shared corpus may be."""
    *above, run = folder.split("__")
    target = root.joinpath(*above, "plugins", "profile", run)
    shutil.copytree(AOBERAI / folder, target)
    for path in target.iterdir():
        path.chmod(0o444)
    target.chmod(0o555)
    return target


@pytest.fixture(scope="module")
def gpu_logdirs(tmp_path_factory) -> Path:
    """Three TensorBoard logdirs side by side, as the Keras callback left them."""
    root = tmp_path_factory.mktemp("corpus")
    for folder in RUNS:
        as_logdir_run(root, folder)
    return root


@pytest.fixture(scope="module")
def table(gpu_logdirs) -> subprocess.CompletedProcess:
    return run_cli("analyze", str(gpu_logdirs))


@pytest.fixture(scope="module")
def rows(gpu_logdirs) -> list[dict]:
    result = run_cli("analyze", str(gpu_logdirs), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_the_table_has_a_row_per_run_with_the_gpu_and_tensorflows_verdict_then(table):
    assert table.returncode == 0, table.stderr[-3000:]
    lines = table.stdout.splitlines()
    row_of = {name: [ln for ln in lines if ln.startswith(name + " ")] for name, *_ in RUNS.values()}
    assert all(len(found) == 1 for found in row_of.values()), table.stdout
    for name, (word, pct, bottleneck), _ in RUNS.values():
        line = row_of[name][0]
        assert RTX_2060 in line
        assert f"{word} {pct:.1f}% {bottleneck}" in line
    assert "3 runs, 0 failed" in lines[-1]


def test_json_has_each_runs_fields_and_both_verdicts(rows):
    by_run = {row["run"]: row for row in rows}
    assert len(rows) == 3 and set(by_run) == {name for name, *_ in RUNS.values()}
    for name, (word, pct, bottleneck), tf_step_ms in RUNS.values():
        row = by_run[name]
        assert set(row) == ROW_FIELDS
        assert row["error"] is None
        assert row["devices"] == RTX_2060
        assert row["steps"] == 1  # the callback profiled one batch
        assert row["step_time_ms"] == pytest.approx(tf_step_ms, abs=0.1)  # XProf now, TF then
        assert row["analysis_s"] > 0
        assert Path(row["path"]).name == name.rsplit("/", 1)[1]
        then = row["then_by_tensorflow"]
        assert (then["classification"], then["input_pct"], then["bottleneck"]) == (
            word,
            pct,
            bottleneck,
        )
        assert then["device_compute_16bit_pct"] == 0.0  # all 32-bit on a Tensor-Core GPU
        ours = row["ours"]
        # ours agrees with TF's then (XProf alone says "potentially" on all three)
        assert ours["classification"] == word
        assert ours["source"] == ("xprof" if word == "potentially" else "gpu_idle_in_iterator")
        assert ours["bottleneck"]
        # every finding, not only the table's first three: a Turing GPU computing in 32-bit
        assert "mixed_precision" in {f["rule"] for f in ours["findings"]}
        assert all(set(f) == {"rule", "severity", "title"} for f in ours["findings"])


def test_a_corrupt_run_is_a_row_with_its_error_and_the_others_are_still_analysed(tmp_path):
    good = as_logdir_run(tmp_path, next(iter(RUNS)))
    bad = tmp_path / "broken" / "plugins" / "profile" / "run"
    bad.mkdir(parents=True)
    (bad / "x.xplane.pb").write_bytes(b"\x0a\xff\xff\xff\xff\x0fnot a protobuf" * 50)
    result = run_cli("analyze", str(tmp_path), "--json")
    assert result.returncode == 1
    by_run = {row["run"]: row for row in json.loads(result.stdout)}
    assert set(by_run) == {"broken/run", short_name(good, tmp_path)}
    assert by_run["broken/run"]["ours"] is None
    assert by_run["broken/run"]["error"].startswith("analysis_failed: ")
    assert str(bad) in by_run["broken/run"]["error"]  # the run, not the temporary copy
    assert by_run[short_name(good, tmp_path)]["devices"] == RTX_2060
    assert by_run[short_name(good, tmp_path)]["error"] is None


def test_an_empty_folder_exits_2(tmp_path):
    (tmp_path / "logs" / "fit").mkdir(parents=True)
    result = run_cli("analyze", str(tmp_path))
    assert result.returncode == 2
    assert "no .xplane.pb found" in result.stderr


def test_one_run_in_a_tree_or_one_run_named_keeps_the_one_run_output(gpu_logdirs, tmp_path):
    folder = next(iter(RUNS))
    as_logdir_run(tmp_path, folder)
    alone = run_cli("analyze", str(tmp_path))
    named = run_cli("analyze", str(gpu_logdirs), "--run", folder.rsplit("__", 1)[1])
    for result in (alone, named):
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.startswith("1 capture file(s) from ")
        assert "steps, step time avg 41.0 ms" in result.stdout
        assert "top findings" not in result.stdout


def test_tensorflows_verdict_is_read_from_its_overview_page():
    verdict = read_tensorflow_verdict(AOBERAI / next(iter(RUNS)))
    assert verdict is not None
    assert (verdict.classification, verdict.input_pct, verdict.bottleneck) == (
        "highly",
        41.6,
        "host",
    )
    assert verdict.statement.startswith("Your program is HIGHLY input-bound because 41.6%")


def test_a_run_without_an_overview_page_or_with_a_broken_one_has_no_verdict_then(tmp_path):
    shutil.copy(AOBERAI / next(iter(RUNS)) / "aoberai.xplane.pb", tmp_path)
    assert read_tensorflow_verdict(tmp_path) is None
    (tmp_path / "aoberai.overview_page.pb").write_bytes(b"\xff\xff\xff")
    assert read_tensorflow_verdict(tmp_path) is None


def test_runs_are_every_folder_with_captures_and_hidden_ones_are_skipped(tmp_path):
    for rel in ("a/plugins/profile/r1", "b/r2", ".staging/x/run"):
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "h.xplane.pb").write_bytes(b"")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "h.overview_page.pb").write_bytes(b"")
    runs = find_runs(tmp_path)
    assert [short_name(r, tmp_path) for r in runs] == ["a/r1", "b/r2"]


def test_devices_name_the_gpus_count_model_and_idle_ones_else_the_hardware():
    def gpu(model: str | None, kernels: int) -> GpuDevice:
        return GpuDevice(
            device="/device:GPU:0",
            model=model,
            compute_capability="7.0",
            kernels=GpuKernels(count=kernels),
        )

    two_busy = [gpu("Tesla V100-16GB", 5 if i < 2 else 0) for i in range(8)]
    eight = Summary(gpu=GpuActivity(devices=two_busy))
    assert describe_devices(eight) == f"8{TIMES}GPU V100-16GB (7.0), 2 active"
    unnamed = Summary(gpu=GpuActivity(devices=[gpu(None, 3)]))
    assert describe_devices(unnamed) == f"1{TIMES}GPU (7.0)"
    assert describe_devices(Summary(utilisation=Utilisation(hardware_type="CPU_ONLY"))) == "CPU"
    assert describe_devices(Summary()) == "?"


@pytest.fixture(scope="module")
def cpu_capture(compute_bound_job, tmp_path_factory) -> list[Path]:
    """One real capture of a real Keras job on the CPU."""
    return capture_once(
        compute_bound_job.address, tmp_path_factory.mktemp("cpu-capture"), "many-runs"
    )


def test_a_tree_of_cpu_runs_says_cpu_and_has_no_verdict_then(cpu_capture, tmp_path):
    for stamp in ("20260101-000000", "20260102-000000"):
        run = tmp_path / "logs" / "fit" / stamp / "train" / "plugins" / "profile" / "run"
        run.mkdir(parents=True)
        for path in cpu_capture:
            shutil.copy(path, run / path.name)
    result = run_cli("analyze", str(tmp_path / "logs"), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout)
    assert [row["run"] for row in rows] == [
        "fit/20260101-000000/train/run",
        "fit/20260102-000000/train/run",
    ]
    for row in rows:
        assert row["devices"] == "CPU"
        assert row["steps"] > 0 and row["step_time_ms"] > 0
        assert row["then_by_tensorflow"] is None
        assert row["ours"]["classification"] in {b.value for b in InputBound}
