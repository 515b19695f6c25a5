"""The rule library: every registered rule fires at its named threshold and not just below it.

No GPU runs here, so the GPU summaries in this module are synthetic: their fields (device idle
time, Memcpy ops on the device, kernel Tensor Core flags, allocator peaks and fragmentation)
follow the shapes of XProf's documented outputs (overview page, framework op stats, kernel stats,
memory profile), as the parsers in `profiler_service.analysis` read them into a `Summary`.
"""

from __future__ import annotations

import logging
import math

import pytest
from helpers import assert_typed_evidence

from profiler_service.analysis import input_impact
from profiler_service.analysis.findings import (
    EVIDENCE,
    IMPACT,
    RULES,
    Rule,
    device,
    distributed,
    eager,
    estimate,
    evaluate,
    evidence_model,
    host,
    input_pipeline,
    memory,
    precision,
    rank,
    registry,
    tensorflow,
)
from profiler_service.analysis.findings import (
    gpu as gpu_rules,
)
from profiler_service.analysis.models import (
    AllocatorMemory,
    Finding,
    GpuActivity,
    GpuDevice,
    GpuKernels,
    HostSummary,
    InputBound,
    InputIterator,
    InputOp,
    InputPipeline,
    KeptAllocation,
    Kernel,
    Kernels,
    MemoryGrowth,
    OpCategory,
    ProcessCpu,
    ProcessMemory,
    PythonStacks,
    Severity,
    StepBreakdown,
    StepTime,
    Summary,
    TopOp,
    Utilisation,
)
from profiler_service.exporters.text_report import describe_saving

# The registry and the names agree: every `Rule` has its rule, and no rule is unnamed.
EXPECTED_RULES = set(Rule)
GPU_RULES = (
    "device_idle",
    "mixed_precision",
    "gpu_imbalance",
    "host_device_transfer",
    "tensor_cores_unused",
    "memory_pressure",
    "memory_fragmentation",
    "memory_temporaries",
)
AVG_MS = 1000  # integer parts over 1000 give exactly the decimal threshold as a float


# --- builders -------------------------------------------------------------------------------


def steps(count: int = 10, avg_ms: float = AVG_MS, **parts: float) -> StepTime:
    return StepTime(
        count=count,
        avg_ms=avg_ms,
        min_ms=avg_ms,
        max_ms=avg_ms,
        stddev_ms=0.0,
        breakdown_avg=StepBreakdown(**parts),
    )


def part_at(threshold: float) -> int:
    """Milliseconds of AVG_MS that make exactly `threshold` of step time."""
    part = round(threshold * AVG_MS)
    assert part / AVG_MS == threshold, "threshold not representable in ms of AVG_MS"
    return part


def cpu(**fields) -> Summary:
    fields.setdefault("tools", ["overview_page", "framework_op_stats"])
    fields.setdefault("utilisation", Utilisation(hardware_type="CPU_ONLY", device_type="CPU"))
    return Summary(**fields)


def gpu(**fields) -> Summary:
    fields.setdefault("tools", ["overview_page", "framework_op_stats", "kernel_stats"])
    fields.setdefault("utilisation", Utilisation(hardware_type="GPU", device_type="GPU"))
    return Summary(**fields)


def op(
    name: str, share: float, side: str = "Host", op_type: str = "MatMul", category=None
) -> TopOp:
    return TopOp(
        name=name,
        type=op_type,
        host_or_device=side,
        category=category or OpCategory.COMPUTE,
        occurrences=10,
        self_time_ms=share * 100,
        self_time_share=share,
    )


def allocator(
    peak_share: float | None = None,
    fragmentation: float | None = None,
    peak_bytes: int = 1000,
    temporaries: int = 0,
    name: str = "GPU_0_bfc",
) -> AllocatorMemory:
    capacity = round(peak_bytes / peak_share) if peak_share else None
    return AllocatorMemory(
        allocator=name,
        peak_bytes_in_use=peak_bytes,
        capacity_bytes=capacity,
        peak_share_of_capacity=peak_share,
        fragmentation_share=fragmentation,
        peak_temporaries_bytes=temporaries,
        peak_temporaries_ops=["model/concat/ConcatV2"] if temporaries else [],
    )


def kernels(eligible_unused_us: int, total_us: int = 1000) -> Kernels:
    return Kernels(
        total_us=total_us,
        top=[
            Kernel(
                name="volta_sgemm_128x64_nn",
                op_name="model/dense/MatMul",
                occurrences=10,
                total_us=eligible_unused_us,
                tensor_core_eligible=True,
                uses_tensor_core=False,
            ),
            Kernel(
                name="redzone_checker",
                op_name="",
                occurrences=1,
                total_us=total_us - eligible_unused_us,
                tensor_core_eligible=False,
                uses_tensor_core=False,
            ),
        ],
        eligible_unused_us=eligible_unused_us,
    )


def run(name: str, summary: Summary) -> Finding | None:
    """The rule's finding, which names it and whose evidence is its declared model."""
    finding = RULES[name](summary)
    if finding is not None:
        assert finding.rule == name, "a finding names the rule that made it"
        assert_typed_evidence(finding)
    return finding


def assert_fires(name: str, summary: Summary, severity: Severity) -> Finding:
    finding = run(name, summary)
    assert finding is not None, f"{name} should fire"
    assert finding.severity is severity
    assert finding.title and finding.recommendation
    return finding


# --- the registry ---------------------------------------------------------------------------


def test_every_rule_is_registered_once_under_its_own_name():
    assert set(RULES) == EXPECTED_RULES
    assert len(RULES) == len(set(RULES))
    for name, func in RULES.items():
        assert func.__name__ == name


def test_registering_a_name_twice_is_refused():
    before = dict(RULES)
    with pytest.raises(ValueError, match="registered twice"):
        registry.rule("input_bound")(lambda summary: None)
    assert before == RULES


# --- input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("classification", "severity"),
    [
        (InputBound.HIGHLY, Severity.CRITICAL),
        (InputBound.MODERATELY, Severity.WARNING),
        (InputBound.POTENTIALLY, None),
        (InputBound.NOT, None),
        (InputBound.UNKNOWN, None),
    ],
)
def test_input_bound_follows_xprofs_classification(classification, severity):
    assert input_pipeline.SEVERITY_OF.get(classification) == severity
    summary = cpu(
        step_time=steps(input_ms=974),
        input_pipeline=InputPipeline(classification=classification, input_share=0.974),
    )
    finding = run("input_bound", summary)
    if severity is None:
        assert finding is None
    else:
        assert finding is not None and finding.severity is severity
        assert finding.impact_share == pytest.approx(0.974)
        assert finding.evidence["input_share"] == pytest.approx(0.974)
        assert finding.docs == input_pipeline.DOCS


def test_input_bound_names_the_slowest_stage_and_puts_python_advice_first():
    summary = cpu(
        step_time=steps(input_ms=500),
        input_pipeline=InputPipeline(
            classification=InputBound.HIGHLY,
            input_share=0.5,
            slowest_stage="preprocessing",
            python_in_pipeline=True,
            slowest_ops=[
                InputOp(
                    name="Iterator::Map",
                    category="preprocessing",
                    count=3,
                    self_time_ms=5.0,
                    self_time_share=0.9,
                )
            ],
        ),
    )
    finding = assert_fires("input_bound", summary, Severity.CRITICAL)
    assert "slowest stage is preprocessing" in finding.title
    assert finding.evidence["slowest_input_op"] == "Iterator::Map"
    # No iterators named: the usual list, said as such, with the Python advice first.
    assert finding.recommendation.startswith("XProf named no tf.data iterators")
    assert finding.evidence["generic_advice"] is True
    assert finding.recommendation.index("Move the Python") < finding.recommendation.index(
        "parallelise the map"
    )

    summary.input_pipeline.python_in_pipeline = False
    assert "Python" not in run("input_bound", summary).recommendation


# --- host -----------------------------------------------------------------------------------


def test_host_overhead_warns_at_xprofs_high_all_others_share():
    at = part_at(host.ALL_OTHER_HIGH_SHARE)
    finding = assert_fires("host_overhead", cpu(step_time=steps(other_ms=at)), Severity.WARNING)
    assert finding.impact_share == host.ALL_OTHER_HIGH_SHARE
    assert run("host_overhead", cpu(step_time=steps(other_ms=at - 1))) is None


def test_between_steps_is_info_then_a_warning_and_names_steps_per_execution_for_short_steps():
    info, warning = (
        part_at(host.BETWEEN_STEPS_INFO_SHARE),
        part_at(host.BETWEEN_STEPS_WARNING_SHARE),
    )
    assert run("between_steps", cpu(step_time=steps(between_steps_ms=info - 1))) is None
    finding = assert_fires(
        "between_steps", cpu(step_time=steps(between_steps_ms=info)), Severity.INFO
    )
    assert finding.impact_share == host.BETWEEN_STEPS_INFO_SHARE
    assert (
        "tf.data" in finding.recommendation and "steps_per_execution" not in finding.recommendation
    )
    assert_fires("between_steps", cpu(step_time=steps(between_steps_ms=warning - 1)), Severity.INFO)
    assert_fires("between_steps", cpu(step_time=steps(between_steps_ms=warning)), Severity.WARNING)
    short = steps(avg_ms=2.0, between_steps_ms=0.4)
    assert "steps_per_execution" in run("between_steps", cpu(step_time=short)).recommendation
    assert "tf.data" in run("between_steps", cpu(step_time=short)).recommendation
    short.steps_per_marker = 4  # already several per call: what else runs between them
    assert "steps_per_execution" not in run("between_steps", cpu(step_time=short)).recommendation


def test_host_overhead_is_info_at_the_moderate_share_only_when_xprof_says_potentially():
    at = part_at(host.ALL_OTHER_MODERATE_SHARE)
    potentially = InputPipeline(classification=InputBound.POTENTIALLY)
    assert_fires(
        "host_overhead",
        cpu(step_time=steps(other_ms=at), input_pipeline=potentially),
        Severity.INFO,
    )
    just_below = cpu(step_time=steps(other_ms=at - 1), input_pipeline=potentially)
    assert run("host_overhead", just_below) is None
    # Between the moderate and the high share, without XProf's POTENTIALLY: nothing.
    high = part_at(host.ALL_OTHER_HIGH_SHARE)
    for classification in (InputBound.NOT, InputBound.UNKNOWN, InputBound.HIGHLY):
        summary = cpu(
            step_time=steps(other_ms=high - 1),
            input_pipeline=InputPipeline(classification=classification),
        )
        assert run("host_overhead", summary) is None


def test_eager_execution_warns_at_its_threshold_when_steps_were_captured():
    def summary(share: float, count: int = 10) -> Summary:
        # Host ops take half of each step: XProf's share is of their time, not the step's.
        return cpu(
            step_time=steps(count=count, host_compute_ms=AVG_MS / 2),
            utilisation=Utilisation(hardware_type="CPU_ONLY", host_eager_share=share),
        )

    threshold = eager.EAGER_WARNING_SHARE
    finding = assert_fires("eager_execution", summary(threshold), Severity.WARNING)
    assert finding.impact_share == pytest.approx(threshold / 2)
    assert run("eager_execution", summary(threshold - 0.0001)) is None
    assert run("eager_execution", summary(0.9, count=0)) is None
    assert run("eager_execution", cpu(step_time=steps())) is None  # host_eager_share unknown


@pytest.mark.parametrize(
    ("name", "field", "threshold"),
    [
        ("kernel_launch_bound", "kernel_launch_ms", gpu_rules.KERNEL_LAUNCH_HIGH_SHARE),
        ("compile_time", "compile_ms", host.COMPILE_WARNING_SHARE),
    ],
)
def test_step_share_rules_warn_at_their_threshold(name, field, threshold):
    at = part_at(threshold)
    finding = assert_fires(name, cpu(step_time=steps(**{field: at})), Severity.WARNING)
    assert finding.impact_share == threshold
    assert run(name, cpu(step_time=steps(**{field: at - 1}))) is None
    assert run(name, cpu(step_time=steps(count=0, avg_ms=None, **{field: at}))) is None


def test_no_step_markers_needs_a_capture_xprof_could_read():
    assert_fires("no_step_markers", cpu(step_time=StepTime()), Severity.WARNING)
    assert run("no_step_markers", cpu(step_time=steps(count=1))) is None
    assert run("no_step_markers", Summary(tools=[])) is None  # nothing was read at all


def test_short_capture_is_info_below_min_steps():
    for count in range(1, host.MIN_STEPS):
        finding = assert_fires("short_capture", cpu(step_time=steps(count=count)), Severity.INFO)
        assert finding.evidence["steps"] == count
    assert run("short_capture", cpu(step_time=steps(count=host.MIN_STEPS))) is None
    assert run("short_capture", cpu(step_time=StepTime())) is None  # no_step_markers covers 0


# --- device ---------------------------------------------------------------------------------


def test_device_idle_warns_then_goes_critical_on_a_gpu():
    def summary(idle: float) -> Summary:
        return gpu(
            utilisation=Utilisation(hardware_type="GPU", device_type="GPU", device_idle_share=idle)
        )

    warning_at, critical_at = device.DEVICE_IDLE_WARNING_SHARE, device.DEVICE_IDLE_CRITICAL_SHARE
    warning = assert_fires("device_idle", summary(warning_at), Severity.WARNING)
    assert warning.impact_share == pytest.approx(warning_at)
    assert run("device_idle", summary(warning_at - 0.0001)) is None
    assert_fires("device_idle", summary(critical_at), Severity.CRITICAL)
    assert_fires("device_idle", summary(critical_at - 0.0001), Severity.WARNING)
    assert run("device_idle", gpu()) is None  # idle time unknown


@pytest.mark.parametrize("hardware_type", ["CPU_ONLY", None])
def test_device_idle_never_fires_without_an_accelerator(hardware_type):
    # XProf reports a CPU-only capture's device as fully idle (duty cycle "0.0%").
    summary = cpu(
        utilisation=Utilisation(
            hardware_type=hardware_type, device_idle_share=1.0, device_duty_cycle_share=0.0
        )
    )
    assert run("device_idle", summary) is None


def test_op_dominates_on_cpu_reads_host_ops():
    at = device.OP_DOMINATES_SHARE
    finding = assert_fires(
        "op_dominates",
        cpu(top_ops=[op("dense/MatMul", at), op("relu", 1 - at, op_type="Relu")]),
        Severity.INFO,
    )
    assert finding.evidence["op"] == "dense/MatMul"
    assert finding.impact_share == at
    below = at - 0.0001
    assert run("op_dominates", cpu(top_ops=[op("dense/MatMul", below)])) is None
    # Device ops do not count on a CPU-only capture.
    assert run("op_dominates", cpu(top_ops=[op("k", 0.9, side="Device")])) is None


def test_op_dominates_skips_input_ops_and_reads_device_ops_on_a_gpu():
    input_op = op("IteratorGetNext", 0.8, op_type="IteratorGetNext", category=OpCategory.INPUT)
    summary = cpu(top_ops=[input_op, op("dense/MatMul", 0.2)])
    assert run("op_dominates", summary) is None

    summary = gpu(top_ops=[op("host/MatMul", 0.9), op("dev/MatMul", 0.6, side="Device")])
    finding = assert_fires("op_dominates", summary, Severity.INFO)
    assert finding.evidence["op"] == "dev/MatMul"
    assert run("op_dominates", gpu(top_ops=[op("host/MatMul", 0.9)])) is None


def test_communication_bound_counts_collectives_and_device_to_device():
    at = part_at(device.COMMUNICATION_WARNING_SHARE)
    collectives = at // 3
    summary = cpu(step_time=steps(collectives_ms=collectives, device_to_device_ms=at - collectives))
    finding = assert_fires("communication_bound", summary, Severity.WARNING)
    assert finding.impact_share == pytest.approx(device.COMMUNICATION_WARNING_SHARE)
    below = cpu(
        step_time=steps(collectives_ms=collectives, device_to_device_ms=at - collectives - 1)
    )
    assert run("communication_bound", below) is None
    # Not gated on an accelerator: multi-worker CPU jobs run collectives too.
    assert_fires("communication_bound", gpu(step_time=steps(collectives_ms=at)), Severity.WARNING)


def test_host_device_transfer_sums_device_memcpy_ops_on_a_gpu():
    at = device.TRANSFER_WARNING_SHARE
    copies = [
        op("MemcpyHToD", at * 2 / 3, side="Device", op_type="MemcpyHToD"),
        op("MemcpyDToH", at / 3, side="Device", op_type="MemcpyDToH"),
        op("dense/MatMul", 0.5, side="Device"),
    ]
    finding = assert_fires("host_device_transfer", gpu(top_ops=copies), Severity.WARNING)
    assert finding.evidence["transfer_share"] == pytest.approx(at)
    below = [op("MemcpyHToD", at - 0.0001, side="Device", op_type="MemcpyHToD")]
    assert run("host_device_transfer", gpu(top_ops=below)) is None
    # Host-side Memcpy ops are not transfers the device waits on.
    host_copies = [op("MemcpyHToD", 0.9, side="Host", op_type="MemcpyHToD")]
    assert run("host_device_transfer", gpu(top_ops=host_copies)) is None
    # Gated on the hardware: never on a CPU-only capture, whatever its ops.
    assert run("host_device_transfer", cpu(top_ops=copies)) is None


def test_tensor_cores_unused_warns_at_its_share_of_kernel_time():
    at = part_at(precision.TENSOR_CORE_UNUSED_SHARE)
    finding = assert_fires("tensor_cores_unused", gpu(kernels=kernels(at)), Severity.WARNING)
    assert finding.evidence["ops"] == ["model/dense/MatMul"]
    assert finding.impact_share == 0.0  # no steps: no share of step time to speak of
    # At stake is a share of step time: 3 steps of 0.5 ms hold the kernels' `at` µs.
    steps = StepTime(count=3, avg_ms=0.5)
    timed = run("tensor_cores_unused", gpu(kernels=kernels(at), step_time=steps))
    assert timed.impact_share == round(at / 1000 / 1.5, 4)
    assert run("tensor_cores_unused", gpu(kernels=kernels(at - 1))) is None
    assert run("tensor_cores_unused", gpu(kernels=Kernels())) is None


# --- memory ---------------------------------------------------------------------------------


def test_memory_pressure_warns_then_goes_critical():
    def summary(*shares: float | None) -> Summary:
        return gpu(memory=[allocator(s, name=f"GPU_{i}_bfc") for i, s in enumerate(shares)])

    finding = assert_fires("memory_pressure", summary(memory.PEAK_WARNING_SHARE), Severity.WARNING)
    assert finding.evidence["allocator"] == "GPU_0_bfc"
    assert run("memory_pressure", summary(memory.PEAK_WARNING_SHARE - 0.0001)) is None
    assert_fires("memory_pressure", summary(memory.PEAK_CRITICAL_SHARE), Severity.CRITICAL)
    assert_fires("memory_pressure", summary(memory.PEAK_CRITICAL_SHARE - 0.0001), Severity.WARNING)
    # The fullest allocator is the one reported; one without a capacity is ignored.
    worst = assert_fires("memory_pressure", summary(None, 0.5, 0.95), Severity.CRITICAL)
    assert worst.evidence["allocator"] == "GPU_2_bfc"
    assert run("memory_pressure", summary(None)) is None


def test_memory_fragmentation_warns_only_when_memory_is_also_tight():
    frag = memory.FRAGMENTATION_WARNING_SHARE
    tight = memory.FRAGMENTATION_MIN_PEAK_SHARE

    def summary(fragmentation, peak_share) -> Summary:
        return gpu(memory=[allocator(peak_share, fragmentation)])

    finding = assert_fires("memory_fragmentation", summary(frag, tight), Severity.WARNING)
    assert finding.evidence["fragmentation_share"] == frag
    assert run("memory_fragmentation", summary(frag - 0.0001, tight)) is None
    assert run("memory_fragmentation", summary(frag, tight - 0.0001)) is None
    assert run("memory_fragmentation", summary(0.9, None)) is None  # capacity unknown
    assert run("memory_fragmentation", summary(None, 0.99)) is None


def test_memory_temporaries_warns_at_its_share_of_the_peak():
    at = round(memory.TEMPORARIES_WARNING_SHARE * 1000)
    summary = gpu(memory=[allocator(0.5, peak_bytes=1000, temporaries=at)])
    finding = assert_fires("memory_temporaries", summary, Severity.WARNING)
    assert finding.impact_share == memory.TEMPORARIES_WARNING_SHARE
    assert finding.evidence["ops"] == ["model/concat/ConcatV2"]
    below = gpu(memory=[allocator(0.5, peak_bytes=1000, temporaries=at - 1)])
    assert run("memory_temporaries", below) is None
    assert run("memory_temporaries", gpu(memory=[allocator(0.5, peak_bytes=0)])) is None


def growing(
    bytes_per_s: float = 1e6,
    *,
    r2: float = 0.99,
    rising: float = 1.0,
    halves: tuple[float, float] | None = None,
    to_capacity: float | None = 600.0,
    growth: int = 10 << 20,
    peak_bytes: int = 1 << 30,
    name: str = "GPU_0_bfc",
) -> AllocatorMemory:
    first, second = halves or (bytes_per_s, bytes_per_s)
    return AllocatorMemory(
        allocator=name,
        peak_bytes_in_use=peak_bytes,
        capacity_bytes=16 << 30,
        growth=MemoryGrowth(
            basis="steps",
            points=40,
            steps=40,
            bytes_per_step=bytes_per_s / 10,
            bytes_per_s=bytes_per_s,
            r2=r2,
            rising_share=rising,
            first_half_bytes_per_s=first,
            second_half_bytes_per_s=second,
            growth_bytes=growth,
            seconds_to_capacity=to_capacity,
        ),
        kept_allocations=[
            KeptAllocation(
                op_name="model/dense/MatMul",
                shape="[32,1024]",
                count=40,
                bytes=growth,
                first_step=3,
                first_time_ms=1.0,
            )
        ],
    )


def test_memory_growth_is_critical_when_capacity_is_near_and_warns_when_a_day_away():
    critical = memory.MEMORY_GROWTH_CRITICAL_S
    finding = assert_fires(
        "memory_growth", gpu(memory=[growing(to_capacity=critical)]), Severity.CRITICAL
    )
    assert finding.evidence["seconds_to_capacity"] == critical
    assert finding.evidence["kept_allocations"][0]["op"] == "model/dense/MatMul"
    assert "`model/dense/MatMul` [32,1024]" in finding.recommendation
    for cause in ("Python list", "TensorArray", "retracing", "grow"):
        assert cause in finding.recommendation
    assert_fires("memory_growth", gpu(memory=[growing(to_capacity=critical + 1)]), Severity.WARNING)
    day = memory.MEMORY_GROWTH_WARNING_S
    assert_fires("memory_growth", gpu(memory=[growing(to_capacity=day)]), Severity.WARNING)
    # Further away than a day and small against the peak: not worth a finding.
    assert run("memory_growth", gpu(memory=[growing(to_capacity=day + 1)])) is None
    # Without a capacity, growth of 5 % of the peak in one capture is enough.
    share = memory.MEMORY_GROWTH_MIN_SHARE_OF_PEAK
    big = growing(to_capacity=None, growth=math.ceil(share * (1 << 30)))
    assert_fires("memory_growth", gpu(memory=[big]), Severity.WARNING)
    small = growing(to_capacity=None, growth=math.ceil(share * (1 << 30)) - 1)
    assert run("memory_growth", gpu(memory=[small])) is None


def test_memory_growth_needs_a_steady_rise_through_the_whole_capture():
    assert run("memory_growth", gpu(memory=[growing()])) is not None
    r2, rising = memory.MEMORY_GROWTH_MIN_R2, memory.MEMORY_GROWTH_MIN_RISING_SHARE
    assert run("memory_growth", gpu(memory=[growing(r2=r2)])) is not None
    assert run("memory_growth", gpu(memory=[growing(r2=r2 - 0.001)])) is None
    assert run("memory_growth", gpu(memory=[growing(rising=rising - 0.001)])) is None
    # A rise at the start that stopped (warm-up, a cache that filled) is not a leak.
    assert run("memory_growth", gpu(memory=[growing(halves=(2e6, 0.0))])) is None
    assert run("memory_growth", gpu(memory=[growing(halves=(0.0, 2e6))])) is None
    tiny = growing(growth=memory.MEMORY_GROWTH_MIN_BYTES - 1)
    assert run("memory_growth", gpu(memory=[tiny])) is None
    assert run("memory_growth", gpu(memory=[growing(bytes_per_s=-1e6)])) is None
    assert run("memory_growth", gpu(memory=[allocator(0.5)])) is None  # no growth fitted


def test_memory_growth_of_a_host_allocator_is_projected_to_the_process_limit():
    """XProf's capacity for the CPU allocator is the host's memory; the job dies at its cgroup
    limit, which the look-back sampler read."""
    host = growing(bytes_per_s=1e6, to_capacity=20 * 3600.0, name="mklcpu")
    assert_fires("memory_growth", cpu(memory=[host]), Severity.WARNING)
    near = cpu(
        memory=[host],
        process_memory=ProcessMemory(
            rss_bytes=2_000_000_000, limit_bytes=2_600_000_000, source="proc"
        ),
    )
    finding = assert_fires("memory_growth", near, Severity.CRITICAL)
    assert finding.evidence["seconds_to_capacity"] == 600.0
    assert finding.evidence["process_limit_bytes"] == 2_600_000_000
    assert "memory limit in 10 min" in finding.title
    # A GPU allocator keeps its own capacity whatever the process's RSS does.
    on_gpu = gpu(memory=[growing(to_capacity=20 * 3600.0)], process_memory=near.process_memory)
    assert_fires("memory_growth", on_gpu, Severity.WARNING)


# --- GPU-only rules on a CPU-only capture ---------------------------------------------------


def cpu_only_capture() -> Summary:
    """What a CPU-only capture reads as: the device "idle", no kernels, no memory profile."""
    return cpu(
        bottleneck="input",
        step_time=steps(count=20, input_ms=974, host_compute_ms=20, other_ms=6),
        input_pipeline=InputPipeline(classification=InputBound.HIGHLY, input_share=0.974),
        utilisation=Utilisation(
            hardware_type="CPU_ONLY",
            device_type="CPU",
            device_duty_cycle_share=0.0,
            device_idle_share=1.0,
            host_idle_share=0.03,
            host_eager_share=0.0,
        ),
        top_ops=[
            op("MemcpyHToD", 0.4, side="Host", op_type="MemcpyHToD", category=OpCategory.MEMORY),
            op("dense/MatMul", 0.3),
        ],
    )


def test_gpu_rules_stay_silent_on_a_cpu_only_capture():
    summary = cpu_only_capture()
    for name in GPU_RULES:
        assert run(name, summary) is None, name
    assert [f.rule for f in evaluate(summary)] == ["input_bound"]


def test_kernel_and_memory_rules_gate_on_their_data_not_on_the_hardware_type():
    """XProf emits no kernel stats and TF no allocator activity without a GPU, so these rules
    read only their data; device_idle and host_device_transfer check hardware_type itself."""
    summary = cpu_only_capture()
    summary.kernels = kernels(500)
    summary.memory = [allocator(0.95, 0.5, temporaries=500)]
    fired = {name for name in GPU_RULES if run(name, summary) is not None}
    assert fired == {
        "tensor_cores_unused",
        "memory_pressure",
        "memory_fragmentation",
        "memory_temporaries",
    }


# --- evaluate() -----------------------------------------------------------------------------


def test_an_empty_summary_yields_no_findings():
    assert evaluate(Summary()) == []


def test_a_readable_capture_without_steps_yields_only_no_step_markers():
    findings = evaluate(Summary(tools=["overview_page"]))
    assert [(f.rule, f.severity) for f in findings] == [("no_step_markers", Severity.WARNING)]


def test_findings_are_ordered_by_saving_then_severity():
    summary = gpu(
        step_time=steps(count=2, input_ms=300, other_ms=200, compile_ms=250),
        input_pipeline=InputPipeline(classification=InputBound.HIGHLY, input_share=0.3),
        utilisation=Utilisation(hardware_type="GPU", device_type="GPU", device_idle_share=0.6),
        top_ops=[op("dev/MatMul", 0.7, side="Device")],
        memory=[allocator(0.85)],
        process_cpu=ProcessCpu(cores_available=8, source="agent"),
    )
    findings = evaluate(summary)
    assert {f.rule for f in findings} == {
        "device_idle",
        "input_bound",
        "compile_time",
        "host_overhead",
        "memory_pressure",
        "op_dominates",
        "short_capture",
    }
    assert [rank(f) for f in findings] == sorted(rank(f) for f in findings)
    assert findings[0].rule == "device_idle"  # 70 % of a 60 % idle device
    # Nothing measurable saved: last, the more severe first.
    assert [f.rule for f in findings[-3:]] == ["memory_pressure", "op_dominates", "short_capture"]


def test_findings_are_ordered_by_what_their_fix_saves_and_nothing_saved_ranks_last(monkeypatch):
    def fixed(name: str, severity: Severity, impact: float, **evidence):
        return lambda summary: Finding(
            severity=severity, title=name, impact_share=impact, evidence=evidence
        )

    monkeypatch.setattr(
        registry,
        "RULES",
        {
            name: _stamped(name, func)
            for name, func in {
                "memory_growth": fixed("memory_growth", Severity.CRITICAL, 1.0),
                "retracing": fixed("retracing", Severity.INFO, 0.3),
                "input_bound": fixed("input_bound", Severity.CRITICAL, 0.6, input_share=0.6),
                "short_capture": fixed("short_capture", Severity.INFO, 0.0),
                "host_overhead": fixed("host_overhead", Severity.WARNING, 0.1),
            }.items()
        },
    )
    four_cores = ProcessCpu(cores_available=4, source="agent")
    found = registry.evaluate(
        Summary(step_time=StepTime(count=10, avg_ms=100.0), process_cpu=four_cores)
    )
    assert [f.rule for f in found] == [
        "input_bound",  # 0.6: 60 ms of input over 4 cores hides behind 40 ms of compute
        "retracing",  # 0.59, an info finding before a critical one that saves nothing
        "host_overhead",  # 0.07
        "memory_growth",  # 0: critical, but no step time saved
        "short_capture",  # 0, info
    ]
    retrace = round(0.3 + 0.7 * tensorflow.RETRACE_REST_REMOVED, 4)
    assert [f.impact.saving_share for f in found] == [0.6, retrace, 0.07, 0.0, 0.0]


def _stamped(name: str, func):
    def stamped(summary):
        finding = func(summary)
        finding.rule = name
        return finding

    return stamped


def test_every_rule_has_an_impact_model():
    assert set(registry.RULES) == set(IMPACT)


def test_the_input_wait_model_spreads_the_wait_over_the_jobs_free_cores():
    def on(cores: float, used: float | None = None, **pipeline) -> Summary:
        return Summary(
            step_time=StepTime(count=20, avg_ms=80.0),
            input_pipeline=InputPipeline(**pipeline),
            process_cpu=ProcessCpu(cores_available=cores, cores_used=used, source="proc"),
        )

    wait = Finding(
        rule="input_bound",
        severity=Severity.CRITICAL,
        title="",
        evidence={"input_share": 0.9, "python_in_pipeline": False},
    )
    # 72 ms of input a step, 8 of compute: on 2 free cores, a batch every 36 ms, and the
    # step's 80 ms of work spread over them: 40 ms.
    got = estimate(wait, on(2, used=0.2))
    assert got.step_ms_after == pytest.approx(40.0)
    assert got.saving_share == pytest.approx(0.5)
    # The range: the point plus the spread of measured savings about the model's points on
    # the calibration corpus.
    low, high = (0.5 + spread for spread in input_impact.SAVING_SPREAD)
    assert got.saving_range == (pytest.approx(low), pytest.approx(high))
    assert "2 core(s) (the job's cores)" in got.basis
    # On 8 cores the input hides behind the step but for 10 ms of work a core.
    assert estimate(wait, on(8)).step_ms_after == pytest.approx(10.0)
    # A job already using its cores leaves the pipeline one: nothing to win.
    assert estimate(wait, on(2, used=2.0)).step_ms_after == pytest.approx(80.0)
    # Its slowest map parallel on both cores already: its 72 ms wait is 144 ms of work on 2
    # cores; prefetched, the step's 152 ms of work over 2 cores bounds it.
    parallel = [InputIterator(path="Iterator::Root::ParallelMapV2", self_time_ms=5, parallelism=2)]
    assert estimate(wait, on(2, iterators=parallel)).step_ms_after == pytest.approx(76.0)
    # Python whose cores used are unknown is not taken to hold the GIL; the basis says it would.
    wait.evidence["python_in_pipeline"] = True
    python = estimate(wait, on(2))
    assert python.saving_share == pytest.approx(0.5) and "GIL" in python.basis
    # Python that keeps a core busy computes under the GIL: a parallel map and a prefetch run it
    # beside the training loop, which waits to win the GIL back (a convoy): the step grows by
    # GIL_CONVOY_SHARE of the Python's 72 ms.
    convoy = -input_impact.GIL_CONVOY_SHARE * 72 / 80
    assert estimate(wait, on(2, used=1.0)).saving_share == pytest.approx(convoy)


def test_a_prefetch_overlaps_only_on_the_cores_the_compute_leaves_free():
    """72 ms of TF ops in a sequential map a step, 8 of compute, on 2 cores: the cores used
    say how many cores the step's compute keeps busy, and so what is left to the map."""
    wait = Finding(
        rule="input_bound",
        severity=Severity.CRITICAL,
        title="",
        evidence={"input_share": 0.9, "pipeline_lacks": ["parallel_calls", "prefetch"]},
    )

    def prefetch(used: float) -> float:
        summary = Summary(
            step_time=StepTime(count=20, avg_ms=80.0),
            process_cpu=ProcessCpu(cores_available=2, cores_used=used, source="agent"),
        )
        return estimate(wait, summary).action("prefetch").step_ms_after

    # 1.0 core used: 72 core-ms of map and 8 of compute on one core, the other free: the map
    # runs on it while the step computes, and the 72 ms batch bounds the step.
    assert prefetch(1.0) == pytest.approx(72.0)
    # 1.1: 88 core-ms, the compute on both cores for its 8 ms: the map waits for it, as before.
    assert prefetch(1.1) == pytest.approx(80.0)


def test_each_change_to_the_pipeline_has_its_own_saving():
    """A sequential, unprefetched pipeline decoding in Python on 2 free cores: 72 ms of input,
    8 of compute a step. Each change it lacks, alone and together, has its own prediction."""
    wait = Finding(
        rule="input_bound",
        severity=Severity.CRITICAL,
        title="",
        evidence={
            "input_share": 0.9,
            "python_in_pipeline": True,
            "pipeline_lacks": ["python", "parallel_calls", "prefetch", "cache"],
        },
    )
    summary = Summary(
        step_time=StepTime(count=20, avg_ms=80.0),
        process_cpu=ProcessCpu(cores_available=2, cores_used=0.3, source="agent"),
    )
    got = estimate(wait, summary)
    assert [a.action for a in got.actions] == [
        "python", "parallel_calls", "prefetch", "python+parallel_calls", "python+prefetch",
        "parallel_calls+prefetch", "python+parallel_calls+prefetch",
    ]  # fmt: skip
    # TF ops do the Python's 72 ms in 7.2: still one at a time, still not ahead.
    assert got.action("python").step_ms_after == pytest.approx(15.2)
    # Two calls at a time, not ahead: 8 + 36.
    parallel = got.action("parallel_calls")
    assert parallel.step_ms_after == pytest.approx(44.0)
    assert parallel.saving_range[1] == pytest.approx(0.45 + input_impact.SAVING_SPREAD[1])
    # Ahead, but one at a time: the 72 ms batch bounds the step.
    assert got.action("prefetch").saving_share == pytest.approx(0.1)
    # Everything: 7.2 ms of TF ops over 2 cores, behind the 8 ms step.
    assert got.saving_share == got.actions[-1].saving_share == pytest.approx(0.9)
    low, high = got.saving_range
    assert low < 0.9 <= high
    # Kept, the Python waits more than it computes (the job's cores used, 0.3): spread over
    # both cores and ahead, the step's 80 ms of work over 2 cores bounds it.
    kept = got.action("parallel_calls+prefetch")
    assert kept.saving_share == pytest.approx(0.5)
    summary.process_cpu.cores_used = 1.0  # computing all the time: it holds the GIL
    held = estimate(wait, summary)
    # Its parallel calls stay serial; with them or a prefetch it runs beside the training loop
    # and takes the GIL from it: no overlap, and a step longer by the convoy's share of 72 ms.
    convoy = -input_impact.GIL_CONVOY_SHARE * 72 / 80
    assert held.action("parallel_calls+prefetch").saving_share == pytest.approx(convoy)
    assert held.action("prefetch").saving_share == pytest.approx(convoy)
    assert held.action("python").saving_share > 0.8  # TF ops: no GIL held at all
    # The report tells the user which changes would slow the step, and by how much.
    text = describe_saving(wait.model_copy(update={"impact": held}))
    low, high = held.action("prefetch").saving_range
    assert f"a prefetch at the end {-convoy:.0%} slower ({-high:.0%}-{-low:.0%} slower)" in text
    # The agent's sampler (it needs the GIL) saw that Python at the user's own lines: it let
    # the GIL go there (numpy's loops), so parallel calls spread it, as they do Python that
    # waits. Seen only in TensorFlow's wrapper as it left, it held the GIL all along.
    summary.python_stacks = PythonStacks(
        file="python.stacks.folded", samples=100, pipeline_samples=60,
        pipeline_library_share=0.02,
    )  # fmt: skip
    native = estimate(wait, summary)
    assert native.action("parallel_calls").step_ms_after == pytest.approx(44.0)
    summary.python_stacks.pipeline_library_share = 0.97
    assert estimate(wait, summary).action("parallel_calls").saving_share == pytest.approx(convoy)
    summary.python_stacks.source = "py-spy"  # reads frames without the GIL: it tells nothing
    summary.python_stacks.pipeline_library_share = 0.02
    assert estimate(wait, summary).action("parallel_calls").saving_share == pytest.approx(convoy)


def test_the_retracing_model_keeps_one_trace_and_what_new_functions_cost_beside_it():
    summary = Summary(step_time=StepTime(count=20, avg_ms=40.0))
    found = Finding(rule="retracing", severity=Severity.WARNING, title="", impact_share=0.5)
    got = estimate(found, summary)
    rest, (below, above) = tensorflow.RETRACE_REST_REMOVED, tensorflow.RETRACE_SAVING_SPREAD
    point = 0.5 + 0.5 * rest
    assert got.saving_share == pytest.approx(point, abs=1e-4)
    assert got.step_ms_after == pytest.approx(40 * (0.5 - 0.5 * rest), abs=0.01)
    assert got.saving_range == (pytest.approx(point + below, abs=1e-4),
                                pytest.approx(min(1.0, point + above), abs=1e-4))  # fmt: skip


def test_the_xla_model_runs_every_call_as_its_steady_calls_ran_at_the_padding_cost():
    """Where some calls neither traced nor compiled, the fix makes every call cost theirs."""
    summary = Summary(step_time=StepTime(count=20, avg_ms=40.0))
    evidence = {"calls_share": 0.9, "steady_share": 0.2, "tracing_share": 0.1}
    found = Finding(rule="xla_recompilation", severity=Severity.WARNING, title="",
                    evidence=evidence, impact_share=0.5)  # fmt: skip
    got = estimate(found, summary)
    cost, (below, above) = tensorflow.XLA_STEADY_COST, tensorflow.XLA_SAVING_SPREAD
    point = 0.9 - 0.2 * cost
    assert got.saving_share == pytest.approx(point, abs=1e-4)
    assert got.step_ms_after == pytest.approx(40 * (0.1 + 0.2 * cost), abs=0.01)
    assert got.saving_range == (pytest.approx(point + below, abs=1e-4),
                                pytest.approx(point + above, abs=1e-4))  # fmt: skip


def test_without_steady_calls_the_xla_model_removes_compiling_tracing_and_part_of_the_rest():
    """Every call traced and compiled: the marked time goes, and a fitted share of the rest."""
    summary = Summary(step_time=StepTime(count=20, avg_ms=40.0))
    found = Finding(rule="xla_recompilation", severity=Severity.WARNING, title="",
                    evidence={"tracing_share": 0.1}, impact_share=0.5)  # fmt: skip
    got = estimate(found, summary)
    point = 0.6 + 0.4 * tensorflow.XLA_REST_REMOVED
    below, above = tensorflow.XLA_SAVING_SPREAD
    assert got.saving_share == pytest.approx(point, abs=1e-4)
    assert got.saving_range == (pytest.approx(point + below, abs=1e-4),
                                pytest.approx(min(1.0, point + above), abs=1e-4))  # fmt: skip


def test_xprofs_compile_time_goes_and_the_rest_of_the_step_stays():
    """XProf's breakdown puts the input and the compute beside the compiling: they stay."""
    summary = Summary(step_time=StepTime(count=20, avg_ms=40.0))
    found = Finding(rule="compile_time", severity=Severity.WARNING, title="", impact_share=0.3)
    got = estimate(found, summary)
    assert got.saving_share == pytest.approx(0.3) and got.step_ms_after == pytest.approx(28.0)
    most = 0.3 + 0.7 * tensorflow.XLA_REST_REMOVED
    assert got.saving_range == (pytest.approx(0.3), pytest.approx(most, abs=1e-4))


def test_the_device_wait_model_gives_the_gpus_busy_share_after_the_fix():
    busy = GpuDevice(
        device="/device:GPU:0",
        busy_share=0.5,
        idle_share=0.5,
        kernels=GpuKernels(count=100, median_us=50, short_share=0.1),
    )
    summary = gpu(step_time=steps(count=10), gpu=GpuActivity(devices=[busy]))
    found = Finding(rule="device_idle", severity=Severity.CRITICAL, title="", impact_share=0.5)
    got = estimate(found, summary)
    assert got.saving_share == pytest.approx(0.35)  # 70 % of the idle half
    assert "busy 50% now, would be busy 77%" in got.basis  # 0.5 / 0.65


def test_a_memory_finding_saves_no_step_time_and_says_so():
    summary = Summary(step_time=StepTime(count=20, avg_ms=40.0))
    found = Finding(rule="memory_growth", severity=Severity.CRITICAL, title="", impact_share=1.0)
    got = estimate(found, summary)
    assert got.saving_share == 0.0 and got.step_ms_after == 40.0
    assert got.basis.startswith("Saves nothing measurable in step time")


def test_a_rule_that_raises_is_logged_and_skipped(monkeypatch, caplog):
    def broken(summary: Summary) -> Finding | None:
        raise ZeroDivisionError("bad rule")

    expected = [f.rule for f in evaluate(cpu_only_capture())]
    monkeypatch.setitem(RULES, "broken", broken)
    with caplog.at_level(logging.ERROR, logger=registry.__name__):
        findings = evaluate(cpu_only_capture())
    assert [f.rule for f in findings] == expected
    assert any("broken" in r.getMessage() and r.exc_info for r in caplog.records)


def test_rules_after_a_broken_one_still_run(monkeypatch):
    def broken(summary: Summary) -> Finding | None:
        raise KeyError("missing")

    expected = [f.rule for f in evaluate(cpu_only_capture())]
    calls = []
    monkeypatch.setattr(
        registry,
        "RULES",
        {"broken": lambda s: calls.append(1) or broken(s), **RULES},  # first, not last
    )
    assert [f.rule for f in registry.evaluate(cpu_only_capture())] == expected
    assert calls == [1], "the broken rule ran, and the others after it"


def test_the_registry_is_restored_after_patching():
    assert "broken" not in RULES
    assert set(RULES) == EXPECTED_RULES


# --- distributed ----------------------------------------------------------------------------


def worker(name: str, busy_ms: float, input_ms: float = 0.0, step_ms: float = 100.0) -> HostSummary:
    return HostSummary(
        host=name,
        step_count=10,
        step_time_ms_avg=step_ms,
        busy_ms_avg=busy_ms,
        breakdown_avg=StepBreakdown(input_ms=input_ms, other_ms=step_ms - busy_ms),
    )


def test_straggler_names_the_busiest_worker_and_its_cause():
    summary = cpu(per_host=[worker("w0", 20, input_ms=5), worker("w1", 90, input_ms=80)])
    finding = assert_fires("straggler", summary, Severity.WARNING)
    assert finding.evidence["straggler"] == "w1"
    assert finding.evidence["slowed_by"] == "its input pipeline"
    assert finding.impact_share == pytest.approx(0.7)
    assert "data shard" in finding.recommendation
    compute = run("straggler", cpu(per_host=[worker("w0", 20), worker("w1", 90, input_ms=10)]))
    assert compute.evidence["slowed_by"] == "its own compute"
    assert "only it runs" in compute.recommendation and "data shard" not in compute.recommendation


def test_balanced_workers_and_single_hosts_have_no_straggler():
    ratio = distributed.STRAGGLER_RATIO
    just_below = cpu(per_host=[worker("w0", 40), worker("w1", 40 * ratio - 0.01)])
    assert run("straggler", just_below) is None
    # Over the ratio but a negligible share of the step: not worth a finding.
    tiny = cpu(per_host=[worker("w0", 1), worker("w1", 5, step_ms=100)])
    assert run("straggler", tiny) is None
    assert run("straggler", cpu(per_host=[worker("w0", 90)])) is None
    assert run("straggler", cpu()) is None


def test_every_rule_declares_its_evidence_model_each_field_described():
    """Every rule's finding holds evidence, so every rule declares its model (`run` above checks
    each finding of this module against it); the catalogue describes each field."""
    assert set(EVIDENCE) == set(RULES)
    for name, model in EVIDENCE.items():
        assert model.model_config.get("extra") == "ignore", name  # old snapshots, newer keys
        undescribed = [f for f, info in model.model_fields.items() if not info.description]
        assert not undescribed, f"{name}: fields without a description: {undescribed}"
        assert evidence_model(name) is model, name  # what the report page reads


def test_a_declared_evidence_model_is_what_the_finding_holds():
    """A rule that declares its evidence's model fills every field of it, and nothing else
    (its readers read it by attribute; the catalogue lists the fields)."""
    [finding] = evaluate(cpu_only_capture())
    model = EVIDENCE[finding.rule]
    assert set(finding.evidence) == set(model.model_fields)
    assert model.model_validate(finding.evidence).model_dump() == finding.evidence
