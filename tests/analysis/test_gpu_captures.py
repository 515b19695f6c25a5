"""GPU diagnosis on real GPU captures recorded by others (tests/fixtures/gpu-captures/README.md
names each file's source), through real XProf conversions; then each GPU rule at its named
threshold on summaries built from those readings.

TensorFlow's own profiler wrote an `overview_page.pb` beside each RTX 2060 capture at capture
time: its input share then is what the input-bound verdict is held to here.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helpers import assert_typed_evidence
from tensorflow.tsl.profiler.protobuf import xplane_pb2
from xprof.protobuf import overview_page_pb2

from profiler_service.analysis import findings
from profiler_service.analysis.findings import EVIDENCE, estimate, input_pipeline, precision
from profiler_service.analysis.findings import gpu as gpu_rules
from profiler_service.analysis.findings.device import DeviceIdleEvidence
from profiler_service.analysis.gpu_waste import capture_waste
from profiler_service.analysis.models import (
    GpuActivity,
    GpuDevice,
    GpuKernels,
    HostActivity,
    Severity,
    StepTime,
    Summary,
    Utilisation,
)
from profiler_service.analysis.readers.gpu_activity import SLICES, read_gpu_activity
from profiler_service.analysis.summary import AnalysisResult, analyse_run
from profiler_service.exporters.text_report import describe_saving

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-captures"
RTX_2060 = FIXTURES / "aoberai-chess-engine"
HIGHLY_INPUT = RTX_2060 / "logs__fit__20210616-112155__train__2021_06_16_11_22_03"
HIGHLY_INPUT_BORDER = RTX_2060 / "logs__fit__20210616-154402__train__2021_06_16_15_44_10"
MODERATELY_INPUT = RTX_2060 / "logs__fit__20210615-181006__train__2021_06_15_18_10_10"
GPU_BUSY = RTX_2060 / "logs__fit__20210616-014419__train__2021_06_16_01_44_30"
EIGHT_V100 = FIXTURES / "tensorflow-profiler-gpu-multi-worker"
COLAB = FIXTURES / "mholmeslinder-semi-supervised-cv"
TESLA_P4 = COLAB / "2020_12_17_05_03_04"  # compute capability 6.1: no Tensor Cores
TESLA_T4_INPUT = COLAB / "2020_12_21_16_42_56"  # TF then: HIGHLY input-bound, 62.3 %
TESLA_P100 = COLAB / "2020_12_22_04_25_51"  # compute capability 6.0


def analyse(run: Path, tmp_path: Path) -> AnalysisResult:
    """XProf writes its cache beside the capture: analyse a copy."""
    copy = tmp_path / run.name
    copy.mkdir()
    for path in run.glob("*.xplane.pb"):
        shutil.copy(path, copy / path.name)
    return analyse_run(copy)


def verdict_then(run: Path) -> float:
    """TF's input share of step time at capture time (its `input_percent`, 0-100, as 0-1)."""
    page = overview_page_pb2.OverviewPage()
    page.ParseFromString(next(run.glob("*.overview_page.pb")).read_bytes())
    return page.input_analysis.input_percent / 100


def by_rule(result: AnalysisResult) -> dict:
    return {f.rule: f for f in result.findings}


@pytest.mark.parametrize(
    "capture",
    sorted({p.parent for p in FIXTURES.rglob("*.xplane.pb")}),
    ids=lambda p: str(p.relative_to(FIXTURES)),
)
def test_every_findings_evidence_on_the_real_captures_is_its_rules_model(capture, tmp_path):
    """On every real capture (NVIDIA and AMD, TensorFlow and JAX), each finding's evidence has
    only the keys its rule's model declares, and gives back the same JSON through it."""
    result = analyse(capture, tmp_path)
    for finding in result.findings:
        assert_typed_evidence(finding)


def test_the_device_planes_name_the_gpu_and_what_it_did(tmp_path):
    result = analyse(HIGHLY_INPUT, tmp_path)
    gpu = result.summary.gpu
    assert gpu is not None and len(gpu.devices) == 1
    device = gpu.devices[0]
    assert (device.model, device.compute_capability, device.sm_count) == (
        "GeForce RTX 2060",
        "7.5",
        30,
    )
    assert device.memory_bytes == 6222839808
    # 144 kernels on the compute stream, mostly a few microseconds each (a small Keras model)
    assert device.kernels.count == 144
    assert device.kernels.median_us < 10 and device.kernels.short_share > 0.5
    assert 0 < device.busy_share < 0.05
    assert device.idle_share == pytest.approx(1 - device.busy_share)
    assert device.copies.host_to_device_ms > 0 and device.copies.device_to_host_ms > 0
    assert len(device.busy_timeline_share) == SLICES
    lane = gpu.hosts[0]
    assert len(lane.activity) == SLICES
    # The article's first case: the GPU waits while the host is in the tf.data iterator.
    assert lane.activity.count(HostActivity.INPUT) >= SLICES // 3
    assert device.idle_while_host_share["input"] > 0.4
    assert result.summary.utilisation.device_compute_32bit_pct == 100.0
    assert "16 bit" in (result.summary.utilisation.precision_statement or "")


@pytest.mark.parametrize(
    "run",
    [HIGHLY_INPUT, HIGHLY_INPUT_BORDER, MODERATELY_INPUT, GPU_BUSY, TESLA_T4_INPUT, TESLA_P4],
)
def test_the_input_verdict_agrees_with_tensorflows_at_capture_time(run, tmp_path):
    """XProf 2.24 calls all four POTENTIALLY input-bound ("All Others"); TF then said 41.6 %
    and 20.5 % (HIGHLY), 7.3 % (MODERATELY) and 0 %."""
    result = analyse(run, tmp_path)
    then = verdict_then(run)
    found = by_rule(result).get("input_bound")
    if then > input_pipeline.MODERATELY_INPUT_SHARE:
        assert found is not None, then
        assert found.evidence["source"] == "gpu_idle_in_iterator"
        # the host's "All Others" advice (Python in the loop) would point the wrong way
        assert "host_overhead" not in by_rule(result)
    else:
        assert found is None
    if run in (HIGHLY_INPUT, TESLA_T4_INPUT):
        assert found.severity is Severity.CRITICAL
    if found is not None and run.parent == RTX_2060:
        # TF 2.5's pipelines are rooted at `Iterator::Model`, tf.data's autotuning wrapper: the
        # advice names a stage the job wrote (Zip, Concatenate), never the wrapper.
        assert "`Model`" not in found.recommendation
        assert re.search(
            r"the slowest stage, your `(zip\(\)|\.concatenate\(\))` \(XProf: `(Zip|Concatenate)`\)",
            found.recommendation,
        )


@pytest.mark.parametrize(
    ("run", "model", "advised"),
    [
        (TESLA_P4, None, False),  # 6.1: a P4 or a GTX 1080, the figures cannot tell
        (TESLA_P100, "Tesla P100-16GB", False),
        (TESLA_T4_INPUT, "Tesla T4", True),
        (MODERATELY_INPUT, "GeForce RTX 2060", True),
    ],
)
def test_mixed_precision_on_every_32bit_tensor_core_gpu_and_never_on_an_older_one(
    run, model, advised, tmp_path
):
    result = analyse(run, tmp_path)
    assert result.summary.gpu.devices[0].model == model
    assert result.summary.utilisation.device_compute_16bit_pct == 0.0
    assert ("mixed_precision" in by_rule(result)) is advised


def test_a_gpu_waiting_on_input_is_idle_and_says_so(tmp_path):
    found = by_rule(analyse(HIGHLY_INPUT, tmp_path))
    idle = found["device_idle"]
    assert idle.severity is Severity.CRITICAL
    assert "waiting for the next batch from tf.data" in idle.title
    assert "GeForce RTX 2060" in idle.title
    assert "prefetch" in idle.recommendation
    assert found["kernel_launch_bound"].evidence["kernels_per_step"] == 144
    # The rules that declare their evidence's model fill every field of it (a real capture).
    for rule in ("device_idle", "input_bound"):
        model = EVIDENCE[rule]
        assert set(found[rule].evidence) == set(model.model_fields), rule
    meanwhile = DeviceIdleEvidence.model_validate(idle.evidence).idle_while_host_share
    assert max(meanwhile, key=meanwhile.get) == "input"  # what the title names


def test_a_busy_gpu_is_not_idle_launch_bound_or_input_bound(tmp_path):
    result = analyse(GPU_BUSY, tmp_path)
    found = by_rule(result)
    assert result.summary.gpu.devices[0].busy_share > 0.8
    assert {"device_idle", "kernel_launch_bound", "input_bound"}.isdisjoint(found)
    # a Turing GPU computing 100 % in 32-bit, and computing most of the time: a warning
    assert found["mixed_precision"].severity is Severity.WARNING
    assert "mixed_float16" in found["mixed_precision"].recommendation


def test_eight_v100s_of_which_two_worked(tmp_path):
    result = analyse(EIGHT_V100, tmp_path)
    gpu = result.summary.gpu
    assert len(gpu.devices) == 8
    assert {d.model for d in gpu.devices} == {"Tesla V100-16GB"}
    assert [d.device for d in gpu.active] == ["/device:GPU:4", "/device:GPU:6"]
    found = by_rule(result)
    imbalance = found["gpu_imbalance"]
    assert "6 of 8 GPUs ran no kernel" in imbalance.title
    assert "/device:GPU:0" in imbalance.evidence["unused"]
    # BERT in mixed precision: 30.5 % of device compute is 16-bit, above XProf's 10 % line
    assert result.summary.utilisation.device_compute_16bit_pct == 30.5
    assert "mixed_precision" not in found
    # Six idle GPUs lengthen no step: the fix returns their GPU-hours instead.
    assert imbalance.impact_share == 0.0
    assert imbalance.impact.saving_share == 0.0
    assert imbalance.impact.returned_gpu_share == 0.75
    assert "6 of 8 GPUs" in imbalance.impact.basis
    assert describe_saving(imbalance) == "returns 75% of the GPUs the job holds (GPU-hours)"
    waste = capture_waste(result.summary, result.findings)
    assert waste is not None and waste.saving_share >= 0.75


def write_space(path: Path, gpu: bool) -> Path:
    """A host that waits 40 ms in the iterator, runs an op for 20 ms, while its GPU copies the
    batch (55-60 ms) and computes (60-100 ms): every figure below follows by hand."""
    space = xplane_pb2.XSpace()
    planes = [
        (
            "/host:CPU",
            [
                ("python3", [("IteratorGetNextOp::DoCompute", 0, 40), ("Iterator::Model", 5, 30)]),
                ("tf_Compute/1", [("dense/MatMul:MatMul", 40, 20)]),
            ],
        )
    ]
    if gpu:
        planes.append(
            (
                "/device:GPU:0",
                [
                    ("Stream #1(Compute)", [("volta_sgemm_128x64_nn", 60, 40)]),
                    ("Stream #2(MemcpyH2D)", [("MemcpyH2D", 55, 5)]),
                ],
            )
        )
    for plane_name, lines in planes:
        plane = space.planes.add(name=plane_name)
        names: dict[str, int] = {}
        for line_id, (line_name, events) in enumerate(lines, start=1):
            line = plane.lines.add(id=line_id, name=line_name, timestamp_ns=1_000_000)
            for name, start_ms, duration_ms in events:
                if name not in names:
                    names[name] = len(names) + 1
                    plane.event_metadata[names[name]].id = names[name]
                    plane.event_metadata[names[name]].name = name
                line.events.add(
                    metadata_id=names[name],
                    offset_ps=start_ms * 10**9,
                    duration_ps=duration_ms * 10**9,
                )
    path.write_bytes(space.SerializeToString())
    return path


def test_busy_idle_and_the_hosts_part_are_measured_from_the_intervals(tmp_path):
    gpu = read_gpu_activity([write_space(tmp_path / "h.xplane.pb", gpu=True)])
    device = gpu.devices[0]
    assert device.window_ms == 100.0
    assert (device.busy_share, device.kernel_share, device.idle_share) == (0.45, 0.4, 0.55)
    assert device.copies.host_to_device_ms == 5.0
    assert device.kernels.count == 1 and device.kernels.median_us == 40_000
    # idle 0-55 ms: in the iterator 0-40, in an op 40-55
    assert device.idle_while_host_share == {
        "input": 0.4,
        "transfer": 0.0,
        "tf_ops": 0.15,
        "python": 0.0,
        "tf_data": 0.0,
        "nothing": 0.0,
    }
    assert gpu.hosts[0].busy_share == {
        "input": 0.4,
        "transfer": 0.0,
        "tf_ops": 0.2,
        "python": 0.0,
        "tf_data": 0.0,
    }
    # 60 slices of 5/3 ms: idle up to 55 ms (slice 33 is 55-56.7 ms), busy from there on
    timeline = device.busy_timeline_share
    assert timeline[:33] == [0.0] * 33 and timeline[33:] == [1.0] * 27
    lane = gpu.hosts[0].activity
    assert lane[:24] == [HostActivity.INPUT] * 24  # 0-40 ms
    assert lane[24:36] == [HostActivity.TF_OPS] * 12  # 40-60 ms
    assert lane[36:] == [HostActivity.NOTHING] * 24


def test_a_capture_without_a_gpu_plane_has_no_gpu_section(tmp_path):
    assert read_gpu_activity([write_space(tmp_path / "h.xplane.pb", gpu=False)]) is None


# --- each GPU rule at its named threshold ---------------------------------------------------


def device(**fields) -> GpuDevice:
    fields.setdefault("device", "/device:GPU:0")
    fields.setdefault(
        "kernels",
        GpuKernels(count=100, median_us=50, short_share=0.1, tensor_core_eligible_ms=50.0),
    )
    fields.setdefault("window_ms", 1000.0)
    return GpuDevice(**fields)


def on_gpu(*devices: GpuDevice, steps: int = 1, **utilisation) -> Summary:
    return Summary(
        tools=["overview_page"],
        step_time=StepTime(count=steps, avg_ms=10.0),
        utilisation=Utilisation(hardware_type="GPU", device_type="GPU", **utilisation),
        gpu=GpuActivity(devices=list(devices)),
    )


def run(name: str, summary: Summary):
    finding = findings.RULES[name](summary)
    if finding is not None:
        assert_typed_evidence(finding)
    return finding


def test_mixed_precision_needs_tensor_cores_and_low_16bit_compute():
    low = 100 * precision.LOW_16BIT_SHARE  # XProf's figure is a percentage
    volta = device(compute_capability="7.0", kernel_share=0.6)
    fp32 = {"device_compute_16bit_pct": low - 0.1, "device_compute_32bit_pct": 100 - low}
    assert run("mixed_precision", on_gpu(volta, **fp32)).severity is Severity.WARNING
    at_line = {"device_compute_16bit_pct": low, "device_compute_32bit_pct": 100 - low}
    assert run("mixed_precision", on_gpu(volta, **at_line)) is None
    pascal = device(compute_capability="6.1", kernel_share=0.6)
    assert run("mixed_precision", on_gpu(pascal, **fp32)) is None
    waiting = device(
        compute_capability="7.5", kernel_share=precision.PRECISION_WARNING_KERNEL_SHARE - 0.01
    )
    assert run("mixed_precision", on_gpu(waiting, **fp32)).severity is Severity.INFO


def test_mixed_precision_reads_kernel_names_where_xprof_gives_no_precision():
    eligible = GpuKernels(count=10, tensor_core_eligible_ms=100.0, tensor_core_ms=9.0)
    summary = on_gpu(device(compute_capability="8.0", kernels=eligible, kernel_share=0.9))
    assert run("mixed_precision", summary) is not None
    used = GpuKernels(count=10, tensor_core_eligible_ms=100.0, tensor_core_ms=10.0)
    assert run("mixed_precision", on_gpu(device(compute_capability="8.0", kernels=used))) is None


def test_kernel_launch_bound_from_tiny_kernels():
    per_step = gpu_rules.TINY_KERNELS_PER_STEP
    tiny = GpuKernels(count=per_step * 4, median_us=4, short_share=gpu_rules.TINY_KERNEL_SHARE)
    idle_gpu = device(kernels=tiny, busy_share=gpu_rules.LAUNCH_BOUND_MAX_BUSY_SHARE - 0.01)
    assert run("kernel_launch_bound", on_gpu(idle_gpu, steps=4)) is not None
    assert run("kernel_launch_bound", on_gpu(idle_gpu, steps=5)) is None  # too few per step
    busy_gpu = device(kernels=tiny, busy_share=gpu_rules.LAUNCH_BOUND_MAX_BUSY_SHARE)
    assert run("kernel_launch_bound", on_gpu(busy_gpu, steps=4)) is None
    big = GpuKernels(count=per_step * 4, median_us=40, short_share=0.49)
    assert run("kernel_launch_bound", on_gpu(device(kernels=big, busy_share=0.1), steps=4)) is None


def test_gpu_imbalance_names_the_busiest_gpu_as_the_slowest():
    points = gpu_rules.IMBALANCE_WARNING_POINTS
    a = device(device="/device:GPU:0", busy_share=0.5)
    b = device(device="/device:GPU:1", busy_share=(50.0 + points) / 100)
    finding = run("gpu_imbalance", on_gpu(a, b))
    assert finding.evidence["slowest"] == "/device:GPU:1"
    # Each replica waits for the busiest: even, both do the mean work (55 of 60 busy).
    assert finding.impact_share == pytest.approx(1 - 55 / 60, abs=1e-4)
    impact = estimate(finding, on_gpu(a, b))
    assert impact.saving_share == pytest.approx(1 - 55 / 60, abs=1e-4)
    assert impact.returned_gpu_share == 0.0
    close = device(device="/device:GPU:1", busy_share=(50.0 + points - 0.1) / 100)
    assert run("gpu_imbalance", on_gpu(a, close)) is None
    assert run("gpu_imbalance", on_gpu(a)) is None  # one GPU


def test_device_idle_and_input_verdict_from_the_gpu_plane():
    highly = input_pipeline.HIGHLY_INPUT_SHARE
    waits = device(
        busy_share=0.1,
        idle_share=0.9,
        idle_while_host_share={"input": highly + 0.001, "tf_ops": 0.05},
    )
    summary = on_gpu(waits)
    idle = run("device_idle", summary)
    assert idle.severity is Severity.CRITICAL and "tf.data" in idle.title
    assert run("input_bound", summary).severity is Severity.CRITICAL
    at_line = device(busy_share=0.1, idle_share=0.9, idle_while_host_share={"input": highly})
    assert run("input_bound", on_gpu(at_line)).severity is Severity.WARNING
    moderately = input_pipeline.MODERATELY_INPUT_SHARE
    low = device(idle_share=0.9, idle_while_host_share={"input": moderately})
    assert run("input_bound", on_gpu(low)) is None


def test_the_report_shows_each_gpu_and_a_lane_per_gpu_and_host(tmp_path):
    from datetime import UTC, datetime

    from profiler_service.config import ReportSettings
    from profiler_service.exporters.charts import HOST_ACTIVITY_COLOURS
    from profiler_service.exporters.report import render_report
    from profiler_service.models import CaptureOptions, Snapshot, SnapshotStatus, Trigger

    result = analyse(EIGHT_V100, tmp_path)
    snapshot = Snapshot(
        id="20260105-120000-default-abc123",
        status=SnapshotStatus.READY,
        target="default",
        trigger=Trigger(),
        capture=CaptureOptions(
            duration_ms=2000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        ),
        created_at=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
        summary=result.summary,
        findings=result.findings,
    )
    html = render_report(snapshot, ReportSettings())
    table = html[
        html.index('<table id="gpu-devices">') : html.index("</table>", html.index("gpu-devices"))
    ]
    assert table.count("Tesla V100-16GB") == 8 and table.count("<td>7.0</td>") == 8
    lanes = html[html.index('<svg class="chart" id="gpu-lanes"') :]
    lanes = lanes[: lanes.index("</svg>")]
    assert lanes.count('<g class="lane"') == 9  # eight GPUs and the host
    host = lanes[lanes.rindex('<g class="lane"') :]
    drawn = sum(host.count(f'fill="{colour}"') for colour, _ in HOST_ACTIVITY_COLOURS.values())
    assert drawn == SLICES
    # GPU:0 ran nothing: no slice of its lane is shaded
    first = lanes.index('<g class="lane"')
    gpu0 = lanes[first : lanes.index('<g class="lane"', first + 1)]
    assert 'fill-opacity="0.00"' in gpu0 and gpu0.count('fill-opacity="0.00"') == SLICES


def test_the_command_line_summary_names_the_gpu_and_the_hosts_part(tmp_path):
    from profiler_service.exporters.text_report import format_summary

    lines = format_summary(analyse(HIGHLY_INPUT, tmp_path).summary)
    gpu_line = next(line for line in lines if line.startswith("GPUs:"))
    assert "RTX 2060 (7.5); idle 98." in gpu_line
    assert "waiting on tf.data 44." in gpu_line


def test_one_piece_of_precision_advice_where_both_rules_would_give_it():
    from profiler_service.analysis.models import Kernel, Kernels

    matmul = Kernel(
        name="volta_sgemm_128x64_nn",
        op_name="dense/MatMul",
        occurrences=10,
        total_us=900.0,
        tensor_core_eligible=True,
        uses_tensor_core=False,
    )
    xprof_kernels = Kernels(total_us=1000.0, top=[matmul], eligible_unused_us=900.0)
    fp32 = {"device_compute_16bit_pct": 0.0, "device_compute_32bit_pct": 100.0}
    summary = on_gpu(device(compute_capability="7.0", kernel_share=0.8), **fp32)
    summary.kernels = xprof_kernels
    fired = {f.rule for f in findings.evaluate(summary)}
    assert "mixed_precision" in fired and "tensor_cores_unused" not in fired
    summary.gpu.devices[0].compute_capability = "6.0"  # no mixed_precision: XProf's rule speaks
    assert "tensor_cores_unused" in {f.rule for f in findings.evaluate(summary)}


def test_one_gpu_used_of_several_is_said_at_info_level_with_the_fix_that_fits():
    """A single-device job on an 8-GPU node is not told to distribute: that it sees 8 GPUs and
    uses one is information, with the fix of seeing and holding one. Two of several working
    while the rest idle stays a warning."""
    used = device(device="/device:GPU:0", busy_share=0.6)
    idle = [device(device=f"/device:GPU:{i}", busy_share=0.0, kernels=GpuKernels()) for i in
            range(1, 8)]  # fmt: skip
    finding = run("gpu_imbalance", on_gpu(used, *idle))
    assert finding.severity is Severity.INFO
    assert finding.title.startswith("The job used 1 of the 8 GPUs it can see")
    assert "CUDA_VISIBLE_DEVICES=0" in finding.recommendation
    assert finding.impact is None or finding.impact.saving_share == 0
    second = device(device="/device:GPU:1", busy_share=0.6)
    finding = run("gpu_imbalance", on_gpu(used, second, *idle[1:]))
    assert finding.severity is Severity.WARNING and "6 of 8 GPUs ran no kernel" in finding.title
