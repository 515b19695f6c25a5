"""A GPU capture whose GPU tracer recorded nothing: the planes name the GPUs, with no kernel and
no copy on them (Windows laptops with a GTX 1650 under TF 2.5-2.10 write such captures; so
does a container where CUPTI is missing or refused). No public capture of that kind is in
tests/fixtures, so it is made here from a real one: the RTX 2060 capture with its GPU planes'
event lines removed and everything else (the host's events, the planes' device figures) kept.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import assert_typed_evidence
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from profiler_service.analysis.gpu_waste import capture_waste
from profiler_service.analysis.readers.gpu_activity import GPU_PLANE_PREFIX
from profiler_service.analysis.summary import analyse_run

RTX_2060_INPUT = (
    Path(__file__).resolve().parents[1]
    / "fixtures/gpu-captures/aoberai-chess-engine"
    / "logs__fit__20210616-112155__train__2021_06_16_11_22_03"
)
DEVICE_RULES = {
    "device_idle", "mixed_precision", "kernel_launch_bound", "gpu_imbalance",
    "tensor_cores_unused", "host_device_transfer", "op_dominates",
}  # fmt: skip


@pytest.fixture(scope="module")
def emptied(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("empty-gpu-trace")
    for path in RTX_2060_INPUT.glob("*.xplane.pb"):
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        gpus = [p for p in space.planes if p.name.startswith(GPU_PLANE_PREFIX)]
        assert gpus, "the source capture has a GPU plane"
        for plane in gpus:
            del plane.lines[:]
        (run / path.name).write_bytes(space.SerializeToString())
    return run


def test_an_empty_gpu_trace_is_named_and_never_read_as_an_idle_gpu(emptied):
    result = analyse_run(emptied)
    rules = {f.rule: f for f in result.findings}
    assert "device_trace_missing" in rules, sorted(rules)
    finding = rules["device_trace_missing"]
    assert "GeForce RTX 2060" in finding.title and "no kernel and no copy" in finding.title
    assert_typed_evidence(finding)
    for cause in ("libcupti", "NVreg_RestrictProfilingToAdminUsers", "SYS_ADMIN", "Windows"):
        assert cause in finding.recommendation
    assert not DEVICE_RULES & set(rules), sorted(rules)
    # The fleet ledger does not take its idle hours from it either.
    assert capture_waste(result.summary, result.findings) is None


def test_the_same_capture_with_its_gpu_trace_says_nothing_of_a_missing_trace(tmp_path):
    for path in RTX_2060_INPUT.glob("*.xplane.pb"):
        shutil.copy(path, tmp_path / path.name)
    rules = {f.rule for f in analyse_run(tmp_path).findings}
    assert "device_trace_missing" not in rules and "device_idle" in rules


@pytest.mark.parametrize(
    ("source", "says", "never"),
    [
        ("amd-tracelens-mi300x/jax08_gemm", "roctracer", "CUPTI"),
        ("jax-h200/bf16_matmul", "jax[cuda12]", "tensorflow[and-cuda]"),
    ],
)
def test_an_empty_trace_is_explained_for_its_vendor_and_framework(source, says, never, tmp_path):
    """The same emptied planes from JAX on AMD MI300X and on an NVIDIA H200: ROCm's tracer,
    not CUPTI, on AMD; JAX's CUDA wheels, not TensorFlow's, for a JAX job."""
    run = RTX_2060_INPUT.parents[1] / source
    for path in run.glob("*.xplane.pb"):
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        for plane in space.planes:
            if plane.name.startswith(GPU_PLANE_PREFIX):
                del plane.lines[:]
        (tmp_path / path.name).write_bytes(space.SerializeToString())
    result = analyse_run(tmp_path)
    finding = next(f for f in result.findings if f.rule == "device_trace_missing")
    assert says in finding.recommendation and never not in finding.recommendation
    assert not DEVICE_RULES & {f.rule for f in result.findings}
