"""GPU diagnosis on real AMD Instinct MI300X captures (JAX 0.8 on ROCm, recorded by AMD for
TraceLens: tests/fixtures/gpu-captures/README.md names each file's source), through real XProf
conversions: the GPU named from its plane's figures, its matrix units called Matrix Cores, bf16
read from ROCm's kernel names, XProf's NVIDIA-only Tensor Core reading not trusted."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import GPU_CAPTURES, analyse_copy

from profiler_service.analysis.gpu_models import Vendor
from profiler_service.analysis.summary import AnalysisResult

MI300X = GPU_CAPTURES / "amd-tracelens-mi300x"


def analyse(name: str, tmp_path: Path) -> AnalysisResult:
    return analyse_copy(MI300X / name, tmp_path)


@pytest.mark.parametrize("name", ["jax08_gemm", "jax08_attention", "jax08_elementwise",
                                  "jax08_conv"])  # fmt: skip
def test_an_instinct_mi300x_is_named_and_no_nvidia_reading_is_applied(name, tmp_path):
    result = analyse(name, tmp_path)
    devices = result.summary.gpu.devices
    assert len(devices) == 8
    assert {(d.vendor, d.model, d.compute_capability, d.sm_count) for d in devices} == {
        (Vendor.AMD.value, "Instinct MI300X", "9.4", 304)
    }
    rules = {f.rule: f for f in result.findings}
    # XProf reads Tensor Core use from NVIDIA kernel names: never applied to ROCm's
    assert "tensor_cores_unused" not in rules
    for finding in result.findings:
        assert "Tensor Core" not in finding.title, finding.title


@pytest.mark.parametrize("name", ["jax08_gemm", "jax08_conv"])
def test_bf16_on_the_matrix_cores_is_read_from_rocm_kernel_names(name, tmp_path):
    """The Tensile kernels `Cijk_..._BBS_..._MI16x16x16x1_...` run bf16 on the matrix cores:
    no advice to compute in 16 bits."""
    result = analyse(name, tmp_path)
    active = result.summary.gpu.active
    eligible = sum(d.kernels.tensor_core_eligible_ms for d in active)
    on_matrix_cores = sum(d.kernels.tensor_core_ms for d in active)
    sixteen = sum(d.kernels.sixteen_bit_ms for d in active)
    assert eligible > 0 and on_matrix_cores / eligible > 0.9 and sixteen / eligible > 0.9
    assert "mixed_precision" not in {f.rule for f in result.findings}


def test_an_elementwise_program_is_not_a_convolution(tmp_path):
    """XLA's `loop_convert_fusion` converts dtypes: it is neither a convolution nor a reason to
    talk about matrix units."""
    result = analyse("jax08_elementwise", tmp_path)
    assert result.summary.gpu.active[0].kernels.tensor_core_eligible_ms == 0
    assert "mixed_precision" not in {f.rule for f in result.findings}


def test_one_gpu_of_eight_is_said_as_information(tmp_path):
    rules = {f.rule: f for f in analyse("jax08_gemm", tmp_path).findings}
    assert rules["gpu_imbalance"].title.startswith("The job used 1 of the 8 GPUs it can see")
    assert rules["gpu_imbalance"].severity.value == "info"
