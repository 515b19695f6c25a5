"""Every finding's advice in the job's own framework and its GPUs' vendor's names, on real
captures: JAX on an H200 and on AMD MI300X GPUs, Keras 2 on an RTX 2060
(tests/fixtures/gpu-captures/README.md names each source)."""

from __future__ import annotations

import pytest
from helpers import GPU_CAPTURES, analyse_copy

FIXTURES = GPU_CAPTURES
TENSORFLOW_ONLY = ("tf.function", "tf.keras", "MirroredStrategy", "tf.distribute",
                   "prefetch_to_device", "mixed_float16", "CommunicationOptions")  # fmt: skip


analyse = analyse_copy


@pytest.mark.parametrize(
    "run",
    [
        FIXTURES / "jax-h200" / "input_starved_python",
        FIXTURES / "jax-h200" / "tiny_kernels",
        FIXTURES / "jax-h200" / "fp32_matmul",
        FIXTURES / "jax-h200" / "transfers",
        FIXTURES / "amd-tracelens-mi300x" / "jax08_gemm",
        FIXTURES / "amd-tracelens-mi300x" / "jax08_elementwise",
    ],
    ids=lambda p: p.name,
)
def test_a_jax_job_is_advised_in_jax(run, tmp_path):
    result = analyse(run, tmp_path)
    assert result.summary.framework == "jax"
    assert result.findings
    for finding in result.findings:
        for word in TENSORFLOW_ONLY:
            assert word not in finding.recommendation, (finding.rule, finding.recommendation)
        assert "TF ops" not in finding.title, finding.title
    jitted = [f for f in result.findings if "jax.jit" in f.recommendation]
    if run.name in ("input_starved_python", "tiny_kernels"):
        assert jitted, [f.rule for f in result.findings]


def test_jax_on_amd_gpus_gets_rocm_s_names(tmp_path):
    result = analyse(FIXTURES / "amd-tracelens-mi300x" / "jax08_gemm", tmp_path)
    imbalance = next(f for f in result.findings if f.rule == "gpu_imbalance")
    assert "HIP_VISIBLE_DEVICES" in imbalance.recommendation
    assert "amd.com/gpu" in imbalance.recommendation
    assert "CUDA_VISIBLE_DEVICES" not in imbalance.recommendation
    markers = next(f for f in result.findings if f.rule == "no_step_markers")
    assert "jax.profiler.StepTraceAnnotation" in markers.recommendation


def test_a_keras_2_job_keeps_the_tensorflow_advice(tmp_path):
    run = (FIXTURES / "aoberai-chess-engine"
           / "logs__fit__20210616-112155__train__2021_06_16_11_22_03")  # fmt: skip
    result = analyse(run, tmp_path)
    assert result.summary.framework == "keras2"
    input_bound = next(f for f in result.findings if f.rule == "input_bound")
    assert "tf.data" in input_bound.recommendation or "prefetch" in input_bound.recommendation
    assert all("jax" not in f.recommendation for f in result.findings)
