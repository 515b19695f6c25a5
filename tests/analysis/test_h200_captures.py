"""GPU diagnosis on captures recorded on an NVIDIA H200 (compute capability 9.0), through real
XProf conversions. They were recorded with JAX, which writes the same XPlane through the same
profiler as TensorFlow (`scripts/record-jax-gpu-captures`; tests/fixtures/gpu-captures/README.md).
Each case is a known cause; `truth.json` holds what the recording script timed itself.

These cases hold the analysis to what a newer GPU stack writes: XLA launches kernels from
command buffers that XProf cannot map to ops (it reads 0 % of compute as 16-bit on a bfloat16
job), cuBLASLt's `nvjet` kernels, and the host staging copies in PjRt rather than in the GPU's
own copy engines.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from profiler_service.analysis.models import HostActivity, Severity
from profiler_service.analysis.summary import AnalysisResult, analyse_run

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-captures" / "jax-h200"
TRUTH = json.loads((H200 / "truth.json").read_text())["cases"]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> dict[str, AnalysisResult]:
    """Each case analysed once (XProf writes its cache beside the capture: a copy of each)."""
    results = {}
    for case in TRUTH:
        copy = tmp_path_factory.mktemp(case)
        shutil.copy(H200 / case / "h200.xplane.pb", copy / "h200.xplane.pb")
        results[case] = analyse_run(copy)
    return results


def findings(result: AnalysisResult) -> dict[str, object]:
    return {f.rule: f for f in result.findings}


def test_the_h200_is_named_and_every_case_counts_the_steps_it_ran(analysed):
    for case, truth in TRUTH.items():
        summary = analysed[case].summary
        gpu = summary.gpu.active[0]
        assert (gpu.model, gpu.compute_capability, gpu.sm_count) == ("H200", "9.0", 132), case
        # Steps whose kernels ran after the trace stopped are not XProf's: a few at the end of
        # a loop that dispatches ahead of the GPU.
        assert truth["steps"] * 0.9 <= summary.step_time.count <= truth["steps"] + 3, case


@pytest.mark.parametrize("case", ["bf16_matmul", "healthy_bf16_train"])
def test_bfloat16_compute_is_not_told_to_use_mixed_precision(analysed, case):
    summary = analysed[case].summary
    assert summary.utilisation.device_compute_16bit_pct == 0.0  # XProf misses the kernels
    kernels = summary.gpu.active[0].kernels
    assert kernels.sixteen_bit_ms > 0.5 * kernels.tensor_core_eligible_ms
    assert "mixed_precision" not in findings(analysed[case])


def test_a_healthy_bfloat16_training_loop_gets_no_warning(analysed):
    result = analysed["healthy_bf16_train"]
    assert result.summary.gpu.active[0].busy_share > 0.8
    loud = [f.rule for f in result.findings if f.severity is not Severity.INFO]
    assert loud == []


def test_32bit_matmuls_on_tensor_cores_get_the_mixed_precision_warning(analysed):
    finding = findings(analysed["fp32_matmul"])["mixed_precision"]
    assert finding.severity is Severity.WARNING
    assert finding.evidence["sixteen_bit_kernel_ms"] == 0.0
    assert "device_idle" not in findings(analysed["fp32_matmul"])


def test_the_mixed_precision_prediction_holds_against_its_fix(analysed):
    """fp32_matmul -> bf16_matmul is the same job made 16-bit: the prediction is read from the
    32-bit capture alone and held against the step the recording script timed in each. The
    share at stake is the matmuls' (about 90 % of the GPU's time), not half the busy share,
    and it is halved once (TF32 -> BF16 on Hopper), not twice."""
    finding = findings(analysed["fp32_matmul"])["mixed_precision"]
    kernels = analysed["fp32_matmul"].summary.gpu.active[0].kernels
    window = analysed["fp32_matmul"].summary.gpu.active[0].window_ms
    assert finding.impact_share == pytest.approx(kernels.tensor_core_eligible_ms / window, abs=0.01)
    assert "fill 89% of its time" in finding.title
    impact = finding.impact
    measured = 1 - TRUTH["bf16_matmul"]["step_ms"] / TRUTH["fp32_matmul"]["step_ms"]  # 0.47
    low, high = impact.saving_range
    assert low <= measured <= high, (measured, impact)
    assert abs(impact.saving_share - measured) < 0.05, (measured, impact)
    assert high - low <= 0.3  # a range a user can plan with
    assert "TF32" in impact.basis and "H100/H200" in impact.basis


@pytest.mark.parametrize(
    ("case", "cause"),
    [("input_starved", HostActivity.NOTHING), ("input_starved_python", HostActivity.PYTHON)],
)
def test_a_gpu_starved_by_python_decoding_is_idle_and_says_what_the_host_did(analysed, case, cause):
    truth = TRUTH[case]
    summary = analysed[case].summary
    gpu = summary.gpu
    # The script's own figures: the device waits for the host's decoding most of each step.
    assert truth["host_ms"] / truth["step_ms"] > 0.9
    assert gpu.active[0].idle_share > 0.9
    meanwhile = {act: gpu.idle_while(act) for act in HostActivity}
    assert max(meanwhile, key=meanwhile.get) is cause
    idle = findings(analysed[case])["device_idle"]
    assert idle.severity is Severity.CRITICAL
    assert idle.evidence["idle_while_host_share"][cause.value] > 0.8
    assert "input_bound" not in findings(analysed[case])  # no tf.data: nothing says input


def test_host_staging_copies_are_named_though_the_gpus_own_copies_are_short(analysed):
    result = analysed["transfers"]
    gpu = result.summary.gpu.active[0]
    assert gpu.copies.host_to_device_ms > 0 and gpu.copies.device_to_host_ms > 0
    copies = (gpu.copies.host_to_device_ms + gpu.copies.device_to_host_ms) / gpu.window_ms
    assert copies < 0.15  # what the GPU's own plane gives alone would not fire
    found = findings(result)
    transfer = found["host_device_transfer"]
    assert transfer.evidence["gpu_idle_while_host_copies_share"] > 0.5
    assert "copying data to or from the GPU" in found["device_idle"].title
    assert "mixed_precision" not in found  # no matmul: nothing for Tensor Cores


def test_op_by_op_dispatch_is_kernel_launch_bound(analysed):
    found = findings(analysed["tiny_kernels"])
    launch = found["kernel_launch_bound"]
    # 200 ops a step in the script, each `y * a + b`: two kernels
    assert launch.evidence["kernels_per_step"] == pytest.approx(400, rel=0.05)
    assert launch.evidence["short_kernel_share"] > 0.9
    assert "mixed_precision" not in found


def test_the_idle_gpus_impact_says_what_the_fix_fills_and_the_busy_share_after(analysed):
    """On the GPU fixtures the impact is computed and shown: the idle time a fix fills, and the
    GPU's busy share after it, from its own plane."""
    idle = findings(analysed["input_starved"])["device_idle"]
    impact = idle.impact
    assert 0 < impact.saving_range[0] <= impact.saving_share <= impact.saving_range[1] <= 1
    assert impact.step_ms_after < impact.step_ms_now
    busy = 1 - analysed["input_starved"].summary.gpu.idle_share
    assert f"busy {busy:.0%} now, would be busy" in impact.basis
    # "Fix this first": the host's Python the GPU waits behind, or the idle GPU, the same time
    # read twice; never a finding that saves nothing.
    first = analysed["input_starved"].findings[0]
    assert first.rule in {"device_idle", "host_overhead"} and first.impact.saving_share > 0.5
