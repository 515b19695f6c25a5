"""The readers of XProf's tool outputs, fed hand-written DataTables.

The inputs copy the shape of XProf's JSON (`{"cols": [...], "rows": [{"c": [{"v": ...}]}],
"p": {...}}`, numbers in properties written as strings, some with `%`) as recorded from real
CPU-only captures on this machine. GPU-only outputs (kernel stats, the memory profile) are
synthetic, shaped after XProf's kernel_stats table and memory_profile.proto in JSON camelCase
with int64 as strings, because no GPU runs here.
"""

from __future__ import annotations

import random

import pytest

from profiler_service.analysis.models import InputBound, Kernels, OpCategory, Summary
from profiler_service.analysis.parts import Parts, assemble
from profiler_service.analysis.readers import input_pipeline, kernels, memory, op_stats, overview
from profiler_service.analysis.readers.input_pipeline import read_input_pipeline
from profiler_service.analysis.readers.kernels import read_kernels
from profiler_service.analysis.readers.memory import read_memory as memory_part
from profiler_service.analysis.readers.op_stats import categorise, read_op_stats
from profiler_service.analysis.readers.overview import read_overview as overview_part
from profiler_service.analysis.readers.xprof_tools import as_float, rows_as_dicts, table_with


def datatable(cols: list[tuple[str, str]], rows: list[list], p: dict | None = None) -> dict:
    return {
        "cols": [{"id": cid, "label": cid, "type": ctype} for cid, ctype in cols],
        "rows": [{"c": [{"v": v} for v in row]} for row in rows],
        "p": p or {},
    }


# --- overview_page --------------------------------------------------------------------------

STEP_COLS = [
    ("stepnum", "string"),
    ("deviceComputeTimeMs", "number"),
    ("deviceToDeviceTimeMs", "number"),
    ("deviceCollectivesTimeMs", "number"),
    ("hostComputeTimeMs", "number"),
    ("kernelLaunchTimeMs", "number"),
    ("infeedTimeMs", "number"),
    ("outfeedTimeMs", "number"),
    ("compileTimeMs", "number"),
    ("otherTimeMs", "number"),
    ("tooltip", "string"),
    ("stepTimeMs", "number"),
]
HIGHLY = (
    "Your program is HIGHLY input-bound because 97.4% of the total step time sampled is "
    "waiting for input. Therefore, you should first focus on reducing the input time."
)
MODERATELY = (
    "Your program is MODERATELY input-bound because 12.3% of the total step time sampled is "
    "waiting for input. Therefore, you would need to reduce both the input time and other time."
)
POTENTIALLY = (
    "Your program is POTENTIALLY input-bound because 35.1% of the total step time sampled is "
    "spent on 'All Others' time (which could be due to I/O or Python execution or both)."
)
NOT = (
    "Your program is NOT input-bound because only 0.5% of the total step time sampled is "
    "waiting for input. Therefore, you should focus on reducing other time."
)


def step_row(n: int, *, host: float, infeed: float, other: float, total: float) -> list:
    return [
        f"train {n}",
        0.0,
        0.0,
        0.0,
        host,
        0.0,
        infeed,
        0.0,
        0.0,
        other,
        f"step {n}",
        total,
    ]


def step_table(rows: list[list], conclusion: str | None = HIGHLY, **props) -> dict:
    p = {
        "steptime_ms_average": "100.5",
        "steptime_ms_minimum": "95.0",
        "steptime_ms_maximum": "110.0",
        "steptime_ms_standard_deviation": "4.2",
        "infeed_time_ms_avg": "97.9",
        "host_compute_time_ms_avg": "2.0",
        "other_time_ms_avg": "0.6",
        "device_compute_time_ms_avg": "0.0",
        "kernel_launch_time_ms_avg": "0.0",
        "compile_time_ms_avg": "0.0",
        "device_to_device_time_ms_avg": "0.0",
        "device_collectives_time_ms_avg": "0.0",
        "outfeed_time_ms_avg": "0.0",
        "hardware_type": "CPU_ONLY",
        "input_conclusion": conclusion or "",
        "summary_nextstep": "Look at Input Pipeline Analyzer",
    }
    p.update(props)
    return datatable(STEP_COLS, rows, p)


def overview_tables(step: dict, bottleneck: str = "input") -> list[dict]:
    analysis = datatable(
        [("programs", "string")],
        [],
        {
            "device_duty_cycle_percent": "0.0%",
            "device_idle_time_percent": "100.0%",
            "host_idle_time_percent": "2.5%",
            "host_op_time_eager_percent": "12.5%",
            "device_op_time_eager_percent": "0.0%",
        },
    )
    verdict = datatable(
        [("link", "string")],
        [],
        {
            "bottleneck": bottleneck,
            "kernel_launch_bottleneck": "no",
            "all_other_bottleneck": "no",
            "device_collectives_bottleneck": "no",
        },
    )
    environment = datatable([("host_id", "string")], [["host-0"]], {"device_type": "CPU"})
    return [analysis, step, environment, verdict]


def three_steps() -> list[list]:
    return [
        step_row(4, host=2.0, infeed=98.0, other=0.5, total=100.5),
        step_row(5, host=1.5, infeed=93.0, other=0.5, total=95.0),
        step_row(6, host=2.5, infeed=107.0, other=0.5, total=110.0),
    ]


def read_overview(tables: list[dict]) -> Summary:
    return assemble(Parts(tools=["overview_page"], overview=overview_part(tables)))


def test_overview_reads_step_count_statistics_and_per_step_breakdown():
    summary = read_overview(overview_tables(step_table(three_steps())))
    st = summary.step_time
    assert st.count == 3
    assert (st.avg_ms, st.min_ms, st.max_ms, st.stddev_ms) == (100.5, 95.0, 110.0, 4.2)
    assert st.breakdown_avg.input_ms == 97.9
    assert st.breakdown_avg.host_compute_ms == 2.0
    assert st.breakdown_avg.other_ms == 0.6
    assert st.breakdown_avg.device_compute_ms == 0.0
    assert [s.name for s in st.steps] == ["train 4", "train 5", "train 6"]
    first = st.steps[0]
    assert first.step_time_ms == 100.5
    assert first.breakdown.input_ms == 98.0
    assert first.breakdown.host_compute_ms == 2.0
    assert first.breakdown.other_ms == 0.5
    assert first.breakdown.kernel_launch_ms == 0.0
    assert summary.next_step_advice == "Look at Input Pipeline Analyzer"


def test_overview_maps_every_step_column_to_its_breakdown_field():
    values = {col: float(i + 1) for i, (col, _) in enumerate(STEP_COLS[1:10])}
    row = ["train 1", *values.values(), "tip", 99.0]
    summary = read_overview([step_table([row])])
    breakdown = summary.step_time.steps[0].breakdown
    for col, field in overview._STEP_COLUMNS.items():
        assert getattr(breakdown, field) == values[col], col


def test_overview_caps_the_step_samples_but_counts_every_step():
    n = overview.MAX_STEP_SAMPLES + 25
    rows = [step_row(i, host=1.0, infeed=1.0, other=0.0, total=2.0) for i in range(n)]
    st = read_overview([step_table(rows)]).step_time
    assert st.count == n
    assert len(st.steps) == overview.MAX_STEP_SAMPLES
    assert st.steps[0].name == "train 0"


@pytest.mark.parametrize(
    ("conclusion", "classification", "pct"),
    [
        (HIGHLY, InputBound.HIGHLY, 97.4),
        (MODERATELY, InputBound.MODERATELY, 12.3),
        (NOT, InputBound.NOT, 0.5),  # "because only 0.5%"
    ],
)
def test_overview_reads_xprofs_input_verdict(conclusion, classification, pct):
    summary = read_overview(overview_tables(step_table(three_steps(), conclusion)))
    pipeline = summary.input_pipeline
    assert pipeline.classification is classification
    assert pipeline.input_share == pytest.approx(pct / 100)
    assert pipeline.conclusion == conclusion


def test_potentially_input_bound_keeps_the_input_share_not_the_all_others_share():
    """XProf's POTENTIALLY sentence quotes the 'All Others' share (35.1 %), not input time;
    `input_share` is documented as the share of step time waiting for input."""
    step = step_table(
        three_steps(),
        POTENTIALLY,
        steptime_ms_average="100.0",
        infeed_time_ms_avg="2.0",
        other_time_ms_avg="35.1",
    )
    pipeline = read_overview(overview_tables(step)).input_pipeline
    assert pipeline.classification is InputBound.POTENTIALLY
    assert pipeline.conclusion == POTENTIALLY
    assert pipeline.input_share == 0.02


def test_input_share_falls_back_to_the_breakdown_without_xprofs_sentence():
    for conclusion in (None, "Your program is something else entirely."):
        step = step_table(three_steps(), conclusion, infeed_time_ms_avg="25.0")
        pipeline = read_overview([step]).input_pipeline
        assert pipeline.classification is InputBound.UNKNOWN
        assert pipeline.input_share == round(25.0 / 100.5, 3)  # 0.249


def test_overview_reads_utilisation_with_percent_signs():
    summary = read_overview(overview_tables(step_table(three_steps())))
    u = summary.utilisation
    assert u.hardware_type == "CPU_ONLY"
    assert u.device_type == "CPU"
    assert u.device_duty_cycle_share == 0.0
    assert u.device_idle_share == 1.0
    assert u.host_idle_share == 0.025
    assert u.host_eager_share == 0.125
    assert u.device_eager_share == 0.0


@pytest.mark.parametrize("bottleneck", ["device", "host", "input"])
def test_overview_reads_xprofs_bottleneck_and_flags(bottleneck):
    summary = read_overview(overview_tables(step_table(three_steps()), bottleneck))
    assert summary.bottleneck == bottleneck
    assert summary.xprof_flags == {
        "kernel_launch": "no",
        "all_other": "no",
        "device_collectives": "no",
    }
    assert summary.notes == []


def test_no_step_markers_makes_the_bottleneck_unknown_with_a_note():
    step = step_table([], HIGHLY)  # XProf still writes the table, with no rows
    summary = read_overview(overview_tables(step, bottleneck="host"))
    assert summary.step_time.count == 0
    assert summary.step_time.avg_ms is None
    assert summary.step_time.steps == []
    assert summary.bottleneck == "unknown"
    assert len(summary.notes) == 1 and "no step markers" in summary.notes[0]
    # A verdict without steps is not trusted.
    assert summary.input_pipeline.classification is InputBound.UNKNOWN
    assert summary.input_pipeline.input_share is None
    assert summary.utilisation.hardware_type == "CPU_ONLY"


def test_overview_without_a_step_table_reads_nothing_but_notes_it():
    summary = read_overview([])
    assert summary.step_time.count == 0
    assert summary.bottleneck == "unknown"
    assert summary.utilisation.hardware_type is None
    assert summary.notes


# --- xprof_tools helpers --------------------------------------------------------------------


def test_table_helpers_read_xprofs_datatable_shape():
    table = datatable([("a", "string"), ("b", "number")], [["x", 1], ["y", None]], {"k": "1"})
    assert table_with([{"p": None}, table], "k") is table
    assert table_with([table], "missing") is None
    assert rows_as_dicts(table) == [{"a": "x", "b": 1}, {"a": "y", "b": None}]
    # Cells may be null in XProf's JSON.
    assert rows_as_dicts({"cols": [{"id": "a"}], "rows": [{"c": [None]}]}) == [{"a": None}]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.0%", 0.0),
        ("12.5%", 12.5),
        ("5834206.797", 5834206.797),
        (3, 3.0),
        ("", None),
        (None, None),
        ("n/a", None),
    ],
)
def test_as_float_reads_xprofs_number_strings(value, expected):
    assert as_float(value) == expected


# --- input_pipeline_analyzer ----------------------------------------------------------------

INPUT_COLS = [
    ("opName", "string"),
    ("count", "number"),
    ("timeInMs", "number"),
    ("timeInPercent", "number"),
    ("selfTimeInMs", "number"),
    ("selfTimeInPercent", "number"),
    ("category", "string"),
]


def input_tables(rows: list[list] | None = None, **props) -> list[dict]:
    p = {
        "advanced_file_read_us": "0.000",
        "demanded_file_read_us": "0.000",
        "enqueue_us": "1234.500",
        "preprocessing_us": "5834206.797",
        "unclassified_nonequeue_us": "12.000",
    }
    p.update(props)
    rows = (
        rows
        if rows is not None
        else [
            ["Iterator::Prefetch", 40, 5900.0, 1.0, 10.0, 0.0017, "Enqueue"],
            ["Iterator::Prefetch::Map", 40, 5890.0, 0.998, 5800.0, 0.9828, "Preprocessing"],
            ["Iterator::Prefetch::Map::Range", 40, 90.0, 0.015, 90.0, 0.0153, "Preprocessing"],
        ]
    )
    recommendation = datatable([("link", "string")], [["tf.data guide"]], {"summary_next": "x"})
    return [recommendation, datatable(INPUT_COLS, rows, p)]


def test_input_pipeline_reads_stage_times_and_the_slowest_stage():
    summary = assemble(Parts(input_pipeline=read_input_pipeline(input_tables())))
    pipeline = summary.input_pipeline
    assert pipeline.stage_time_us == {
        "file read (on demand)": 0.0,
        "file read (in advance)": 0.0,
        "preprocessing": 5834206.797,
        "enqueue": 1234.5,
        "unclassified": 12.0,
    }
    assert pipeline.slowest_stage == "preprocessing"


def test_input_pipeline_lists_the_slowest_ops_by_self_time():
    summary = assemble(Parts(input_pipeline=read_input_pipeline(input_tables())))
    ops = summary.input_pipeline.slowest_ops
    assert [o.name for o in ops] == [
        "Iterator::Prefetch::Map",
        "Iterator::Prefetch::Map::Range",
        "Iterator::Prefetch",
    ]
    top = ops[0]
    assert (top.category, top.count, top.self_time_ms) == ("Preprocessing", 40, 5800.0)
    assert top.self_time_share == 0.9828  # XProf writes these as fractions (percent / 100)


def test_input_pipeline_keeps_the_top_ops_only():
    rows = [[f"Iterator::Op{i}", 1, i, 0.1, float(i), 0.1, "Preprocessing"] for i in range(12)]
    summary = assemble(Parts(input_pipeline=read_input_pipeline(input_tables(rows))))
    ops = summary.input_pipeline.slowest_ops
    assert len(ops) == input_pipeline.TOP_INPUT_OPS
    assert ops[0].name == "Iterator::Op11"


def test_input_pipeline_without_input_time_names_no_stage():
    zeros = dict.fromkeys(input_pipeline.STAGES, "0.000")
    summary = assemble(Parts(input_pipeline=read_input_pipeline(input_tables([], **zeros))))
    assert summary.input_pipeline.slowest_stage is None
    assert summary.input_pipeline.slowest_ops == []


def test_input_pipeline_without_its_table_has_no_part():
    assert read_input_pipeline([datatable([("x", "string")], [])]) is None


# --- framework_op_stats ---------------------------------------------------------------------

OP_COLS = [
    ("rank", "number"),
    ("host_or_device", "string"),
    ("type", "string"),
    ("operation", "string"),
    ("occurrences", "number"),
    ("total_time", "number"),
    ("avg_time", "number"),
    ("total_self_time", "number"),
    ("avg_self_time", "number"),
    ("device_total_self_time_percent", "number"),
    ("device_cumulative_total_self_time_percent", "number"),
    ("host_total_self_time_percent", "number"),
    ("Host_cumulative_total_self_time_percent", "number"),
    ("measured_flop_rate", "number"),
    ("model_flop_rate", "number"),
    ("measured_memory_bw", "number"),
    ("operational_intensity", "number"),
    ("bound_by", "string"),
    ("eager", "string"),
]


def op_row(rank, side, op_type, name, self_us, occurrences=10, eager="Function") -> list:
    return [
        rank,
        side,
        op_type,
        name,
        occurrences,
        self_us,
        self_us / occurrences,
        self_us,
        self_us / occurrences,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        "Unknown",
        eager,
    ]


REAL_OPS = [
    op_row(1, "Host", "_MklNativeFusedMatMul", "model/dense/Relu", 6000.0),
    op_row(2, "Host", "EagerPyFunc", "EagerPyFunc", 2000.0, eager="Eager"),
    op_row(3, "Host", "ConcatV2", "model/concat", 1000.0),
    op_row(4, "Host", "ReadVariableOp", "model/dense/ReadVariableOp", 1000.0),
    op_row(5, "Device", "MatMul", "model/dense_1/MatMul", 300.0),
    op_row(6, "Device", "NcclAllReduce", "allreduce/NcclAllReduce", 100.0),
]
IDLE = op_row(0, "Host", "IDLE", "IDLE", 1_000_000.0)


def op_tables(rows: list[list] = REAL_OPS) -> list[dict]:
    return [datatable(OP_COLS, [IDLE, *rows]), datatable(OP_COLS, list(rows))]


def read_ops(tables: list[dict], **kwargs) -> Summary:
    return assemble(Parts(op_stats=read_op_stats(tables, **kwargs)))


def test_op_stats_exclude_idle_from_the_top_ops():
    for tables in (op_tables(), op_tables()[:1]):  # also when only the table with IDLE comes
        summary = read_ops(tables)
        assert "IDLE" not in {o.name for o in summary.top_ops}
        assert "IDLE" not in {o.type for o in summary.top_ops}
        assert summary.top_ops[0].name == "model/dense/Relu"


def test_op_stats_shares_are_per_side():
    summary = read_ops(op_tables())
    by_name = {o.name: o for o in summary.top_ops}
    assert by_name["model/dense/Relu"].self_time_share == pytest.approx(0.6)
    assert by_name["model/dense/Relu"].self_time_ms == 6.0
    assert by_name["model/dense_1/MatMul"].self_time_share == pytest.approx(0.75)
    for side in ("Host", "Device"):
        total = sum(o.self_time_share for o in summary.top_ops if o.host_or_device == side)
        assert total == pytest.approx(1.0)


def test_op_stats_sort_by_self_time_and_keep_top_k():
    summary = read_ops(op_tables(), top_k=3)
    assert [o.self_time_ms for o in summary.top_ops] == [6.0, 2.0, 1.0]
    assert len(read_ops(op_tables()).top_ops) == len(REAL_OPS)


def test_op_stats_read_categories_eager_and_category_shares():
    summary = read_ops(op_tables())
    by_name = {o.name: o for o in summary.top_ops}
    assert by_name["model/dense/Relu"].category is OpCategory.COMPUTE
    assert by_name["EagerPyFunc"].category is OpCategory.INPUT
    assert by_name["model/concat"].category is OpCategory.MEMORY
    assert by_name["model/dense/ReadVariableOp"].category is OpCategory.OTHER
    assert by_name["allreduce/NcclAllReduce"].category is OpCategory.COMMUNICATION
    assert by_name["EagerPyFunc"].eager is True
    assert by_name["model/dense/Relu"].eager is False
    total = 10_400.0
    assert summary.op_category_share == {
        "communication": round(100 / total, 4),
        "compute": round(6300 / total, 4),
        "input": round(2000 / total, 4),
        "memory": round(1000 / total, 4),
        "other": round(1000 / total, 4),
    }


@pytest.mark.parametrize(
    ("op_type", "side", "category"),
    [
        ("MatMul", "Host", OpCategory.COMPUTE),
        ("_MklMatMul", "Host", OpCategory.COMPUTE),
        ("_MklNativeFusedMatMul", "Host", OpCategory.COMPUTE),
        ("MatMul", "Device", OpCategory.COMPUTE),
        ("ConcatV2", "Host", OpCategory.MEMORY),
        ("Pack", "Device", OpCategory.MEMORY),
        ("MemcpyHToD", "Device", OpCategory.MEMORY),
        ("NcclAllReduce", "Device", OpCategory.COMMUNICATION),
        ("CollectiveReduceV2", "Host", OpCategory.COMMUNICATION),
        ("IteratorGetNext", "Host", OpCategory.INPUT),
        ("EagerPyFunc", "Host", OpCategory.INPUT),
        ("PyFunc", "Host", OpCategory.INPUT),
        ("SomeUnknownHostOp", "Host", OpCategory.OTHER),
        ("SomeUnknownDeviceOp", "Device", OpCategory.COMPUTE),
    ],
)
def test_categorise(op_type, side, category):
    assert categorise(op_type, side) is category


@pytest.mark.parametrize(
    ("rows", "python"),
    [
        ([op_row(1, "Host", "EagerPyFunc", "EagerPyFunc", 10.0)], True),
        ([op_row(1, "Host", "PyFunc", "PyFunc", 10.0)], True),
        ([op_row(1, "Host", "PyFuncStateless", "PyFuncStateless", 10.0)], True),
        ([op_row(1, "Device", "EagerPyFunc", "EagerPyFunc", 10.0)], False),
        ([op_row(1, "Host", "MatMul", "MatMul", 10.0)], False),
    ],
)
def test_python_in_pipeline_comes_from_host_python_ops(rows, python):
    assert read_ops(op_tables(rows)).input_pipeline.python_in_pipeline is python


def test_python_op_below_the_top_k_still_counts():
    rows = [op_row(i, "Host", "MatMul", f"m{i}", 1000.0) for i in range(1, 12)]
    rows.append(op_row(12, "Host", "EagerPyFunc", "EagerPyFunc", 1.0))
    summary = read_ops(op_tables(rows), top_k=op_stats.TOP_OPS)
    assert "EagerPyFunc" not in {o.name for o in summary.top_ops}
    assert summary.input_pipeline.python_in_pipeline is True


def test_op_stats_without_their_table_leave_the_summary_alone():
    summary = read_ops([datatable([("x", "string")], [])])
    assert summary.top_ops == []
    assert summary.op_category_share == {}


# --- memory_profile -------------------------------------------------------------------------

GIB = 1024**3


def snapshot(t_ps: int, heap: int, stack: int = 0, op: str = "", size: int = 0) -> dict:
    return {
        "timeOffsetPs": str(t_ps),
        "aggregationStats": {
            "stackReservedBytes": str(stack),
            "heapAllocatedBytes": str(heap),
            "freeMemoryBytes": "0",
            "fragmentation": 0.1,
            "peakBytesInUse": str(heap + stack),
        },
        "activityMetadata": {
            "memoryActivity": "ALLOCATION",
            "requestedBytes": str(size),
            "allocationBytes": str(size),
            "address": "140000000",
            "tfOpName": op,
            "stepId": "4",
            "regionType": "output",
            "dataType": "float",
            "tensorShape": "[32,1024]",
        },
    }


def memory_profile(**allocator_fields) -> dict:
    # At the peak, XProf keeps only the snapshots of the allocations still alive.
    at_peak = [
        snapshot(1_000_000_000, 6 * GIB, op="model/concat/ConcatV2", size=GIB),
        snapshot(2_000_000_000, 7 * GIB, op="model/dense/MatMul", size=GIB),
        snapshot(3_000_000_000, 8 * GIB, op="model/stack/Pack", size=GIB // 2),
    ]
    data = {
        "profileSummary": {
            "peakBytesUsageLifetime": str(9 * GIB),
            "peakStats": {
                "peakBytesInUse": str(8 * GIB),
                "fragmentation": 0.4,
                "heapAllocatedBytes": str(8 * GIB - 1024),
                "stackReservedBytes": "1024",
            },
            "peakStatsTimePs": "3000000000",
            "memoryCapacity": str(10 * GIB),
        },
        "memoryProfileSnapshots": at_peak,
        "activeAllocations": [
            {"snapshotIndex": "0", "specialIndex": "-1", "numOccurrences": "2"},
            {"snapshotIndex": "1", "specialIndex": "-1", "numOccurrences": "1"},
            {"snapshotIndex": "2", "specialIndex": "-1", "numOccurrences": "1"},
            {"snapshotIndex": "-1", "specialIndex": "0", "numOccurrences": "1"},
            {"snapshotIndex": "7", "specialIndex": "-1", "numOccurrences": "1"},
        ],
        "sampledTimelineSnapshots": [
            snapshot(500_000_000, 1 * GIB, stack=1024),
            snapshot(1_500_000_000, 4 * GIB),
            snapshot(3_000_000_000, 8 * GIB - 1024, stack=1024),
        ],
    }
    data.update(allocator_fields)
    return {
        "memoryProfilePerAllocator": {"GPU_0_bfc": data},
        "numHosts": 1,
        "memoryIds": ["GPU_0_bfc"],
    }


def read_memory(profile: dict) -> Summary:
    return assemble(Parts(memory=memory_part(profile)))


def test_memory_reads_the_peak_capacity_and_fragmentation():
    [m] = read_memory(memory_profile()).memory
    assert m.allocator == "GPU_0_bfc"
    assert m.peak_bytes_in_use == 8 * GIB
    assert m.capacity_bytes == 10 * GIB
    assert m.peak_share_of_capacity == 0.8
    assert m.fragmentation_share == 0.4


def test_memory_falls_back_to_the_lifetime_peak_and_tolerates_no_capacity():
    profile = memory_profile(
        profileSummary={"peakBytesUsageLifetime": str(3 * GIB), "memoryCapacity": "0"}
    )
    [m] = read_memory(profile).memory
    assert m.peak_bytes_in_use == 3 * GIB
    assert m.capacity_bytes is None
    assert m.peak_share_of_capacity is None
    assert m.fragmentation_share is None


def test_memory_timeline_is_relative_ms_of_heap_plus_stack():
    [m] = read_memory(memory_profile()).memory
    assert [(p.time_ms, p.bytes_in_use) for p in m.timeline] == [
        (0.0, GIB + 1024),
        (1.0, 4 * GIB),
        (2.5, 8 * GIB),
    ]


def test_memory_timeline_falls_back_to_the_snapshots():
    [m] = read_memory(memory_profile(sampledTimelineSnapshots=[])).memory
    assert [p.bytes_in_use for p in m.timeline] == [6 * GIB, 7 * GIB, 8 * GIB]


@pytest.mark.parametrize("n", [memory.MAX_TIMELINE_POINTS, 301, 599, 1000, 5000])
def test_memory_timeline_is_capped(n):
    sampled = [snapshot(i * 1_000_000, i) for i in range(n)]
    [m] = read_memory(memory_profile(sampledTimelineSnapshots=sampled)).memory
    assert 0 < len(m.timeline) <= memory.MAX_TIMELINE_POINTS
    assert m.timeline[0].time_ms == 0.0
    times = [p.time_ms for p in m.timeline]
    assert times == sorted(times)


def test_memory_temporaries_at_the_peak_come_from_concat_and_stack_ops():
    [m] = read_memory(memory_profile()).memory
    # ConcatV2 (1 GiB x 2 occurrences) + Pack (0.5 GiB); the MatMul output is no temporary,
    # and the special (-1) and out-of-range indices are skipped.
    assert m.peak_temporaries_bytes == 2 * GIB + GIB // 2
    assert m.peak_temporaries_ops == ["model/concat/ConcatV2", "model/stack/Pack"]


def test_memory_reads_every_allocator_in_name_order():
    profile = memory_profile()
    gpu0 = profile["memoryProfilePerAllocator"]["GPU_0_bfc"]
    profile["memoryProfilePerAllocator"] = {"GPU_1_bfc": gpu0, "GPU_0_bfc": gpu0}
    assert [m.allocator for m in read_memory(profile).memory] == ["GPU_0_bfc", "GPU_1_bfc"]


def event(t_ms: float, heap: int, activity: str, address: int, step: int | None, **meta) -> dict:
    """One entry of XProf's sampledTimelineSnapshots: memory in use after an allocation or a
    free, with the op, shape and step XProf attaches (it copies them onto the free)."""
    data = snapshot(round(t_ms * 1e9), heap)
    data["activityMetadata"].update(
        memoryActivity=activity,
        address=str(address),
        stepId="" if step is None else str(step),
        allocationBytes=str(meta.pop("size", 0)),
        tfOpName=meta.pop("op", ""),
        tensorShape=meta.pop("shape", ""),
    )
    return data


def training_timeline(
    steps: int,
    kept: int,
    scratch: int,
    base: int = GIB,
    step_ms: float = 20.0,
    marked: bool = True,
) -> list[dict]:
    """Each step allocates a scratch tensor and an activation, frees the scratch, and frees the
    activation unless it is `kept` (a leak of `kept` bytes per step): XProf's event order."""
    events, in_use, address = [], base, 1000
    for step in range(steps):
        t = step * step_ms
        label = step if marked else None
        in_use += scratch
        events.append(
            event(
                t + 1,
                in_use,
                "ALLOCATION",
                address,
                label,
                size=scratch,
                op="model/scratch/RandomUniform",
                shape="[256,1024]",
            )
        )
        in_use += max(kept, 1024)
        events.append(
            event(
                t + 2,
                in_use,
                "ALLOCATION",
                address + 1,
                label,
                size=max(kept, 1024),
                op="model/dense/Relu",
                shape="[32,256]",
            )
        )
        in_use -= scratch
        events.append(
            event(
                t + 3,
                in_use,
                "DEALLOCATION",
                address,
                label,
                size=scratch,
                op="model/scratch/RandomUniform",
                shape="[256,1024]",
            )
        )
        if not kept:
            in_use -= 1024
            events.append(
                event(
                    t + 4,
                    in_use,
                    "DEALLOCATION",
                    address + 1,
                    label,
                    size=1024,
                    op="model/dense/Relu",
                    shape="[32,256]",
                )
            )
        address += 2
    return events


def test_memory_growth_per_step_is_read_at_each_steps_low_point():
    kib = 1024
    profile = memory_profile(
        sampledTimelineSnapshots=training_timeline(50, 256 * kib, 64 * GIB // 1024)
    )
    [m] = read_memory(profile).memory
    g = m.growth
    assert g.basis == "steps"
    assert g.bytes_per_step == pytest.approx(256 * kib, rel=1e-6)  # the sawtooth is not counted
    assert g.bytes_per_s == pytest.approx(256 * kib / 0.020, rel=1e-6)
    assert g.r2 == pytest.approx(1.0) and g.rising_share == 1.0
    assert g.seconds_to_capacity == pytest.approx((10 * GIB - 8 * GIB) / g.bytes_per_s, rel=1e-3)
    assert len(m.step_floors) == g.points == 48  # the first and last steps are partial
    assert memory.may_be_growing(m)


def test_a_sawtooth_within_each_step_is_no_growth():
    profile = memory_profile(sampledTimelineSnapshots=training_timeline(50, 0, 512 * 2**20))
    [m] = read_memory(profile).memory
    assert m.growth.bytes_per_s == 0.0 and m.growth.r2 == 0.0
    assert not memory.may_be_growing(m)


def test_a_leak_whose_low_points_zig_zag_still_rises_two_steps_apart():
    """TF's BFC allocator on the CPU: a kept 512 KiB tensor lands in one step's free chunk or
    the next, so the low points go +1 MiB, -0.5 MiB (read off a real capture)."""
    mib = 2**20
    floors = [(20.0 * i, 22 * mib + i * mib // 2 + (mib // 2 if i % 2 else 0)) for i in range(40)]
    g = memory.fit_growth("steps", floors, 40, None, 60 * mib)
    assert g.r2 > 0.95 and g.rising_share == 1.0  # lag 1 alone: 0.51
    rng = random.Random(3)
    noise = [(20.0 * i, 30 * mib + rng.randrange(8 * mib)) for i in range(40)]
    assert memory.fit_growth("steps", noise, 40, None, 60 * mib).rising_share < 0.6


def test_without_step_markers_growth_is_read_over_slices_of_the_capture():
    timeline = training_timeline(60, 100_000, 2**20, marked=False)
    [m] = read_memory(memory_profile(sampledTimelineSnapshots=timeline)).memory
    assert m.growth.basis == "time" and m.growth.points == memory.TIME_WINDOWS
    assert m.growth.bytes_per_step is None
    assert m.growth.bytes_per_s == pytest.approx(100_000 / 0.020, rel=0.05)


def test_alive_at_peak_lists_xprofs_active_allocations_largest_first():
    [m] = read_memory(memory_profile()).memory
    assert [(a.op_name, a.bytes * a.occurrences) for a in m.alive_at_peak] == [
        ("model/concat/ConcatV2", 2 * GIB),
        ("model/dense/MatMul", GIB),
        ("model/stack/Pack", GIB // 2),
    ]


@pytest.mark.parametrize("profile", [{}, {"memoryProfilePerAllocator": {}, "numHosts": 1}])
def test_cpu_only_memory_profile_is_empty(profile):
    assert read_memory(profile).memory == []


# --- kernel_stats ---------------------------------------------------------------------------

KERNEL_COLS = [
    ("rank", "number"),
    ("kernel_name", "string"),
    ("registers_per_thread", "number"),
    ("shmem_bytes", "number"),
    ("block_dim", "string"),
    ("grid_dim", "string"),
    ("occupancy_pct", "number"),
    ("is_op_tensor_core_eligible", "boolean"),
    ("is_kernel_using_tensor_core", "boolean"),
    ("op_name", "string"),
    ("occurrences", "number"),
    ("total_duration_us", "number"),
    ("avg_duration_us", "number"),
    ("min_duration_us", "number"),
    ("max_duration_us", "number"),
]


def kernel_row(rank, name, eligible, used, op_name, total_us, occurrences=10) -> list:
    avg = total_us / occurrences
    return [
        rank,
        name,
        128,
        0,
        "256,1,1",
        "80,1,1",
        50.0,
        eligible,
        used,
        op_name,
        occurrences,
        total_us,
        avg,
        avg,
        avg,
    ]


KERNEL_ROWS = [
    kernel_row(1, "volta_sgemm_128x64_nn", True, False, "model/dense/MatMul", 600.0),
    kernel_row(2, "volta_h884gemm_64x64_nn", True, True, "model/dense_1/MatMul", 250.0),
    kernel_row(3, "redzone_checker", False, False, "", 100.0),
    kernel_row(4, "void cudnn::conv", True, False, "model/conv/Conv2D", 50.0),
]


def test_kernels_read_the_eligible_unused_time():
    k = read_kernels(datatable(KERNEL_COLS, KERNEL_ROWS))  # one table, not a list
    assert k.total_us == 1000.0
    assert k.eligible_unused_us == 650.0
    assert [x.name for x in k.top] == [
        "volta_sgemm_128x64_nn",
        "volta_h884gemm_64x64_nn",
        "redzone_checker",
        "void cudnn::conv",
    ]
    top = k.top[0]
    assert (top.op_name, top.occurrences, top.tensor_core_eligible, top.uses_tensor_core) == (
        "model/dense/MatMul",
        10,
        True,
        False,
    )


def test_kernels_accept_a_list_and_keep_the_top_ones():
    rows = [kernel_row(i, f"k{i}", False, False, f"op{i}", float(i)) for i in range(1, 15)]
    summary = Summary(kernels=read_kernels([datatable(KERNEL_COLS, rows)]))
    assert len(summary.kernels.top) == kernels.TOP_KERNELS
    assert summary.kernels.top[0].name == "k14"
    assert summary.kernels.total_us == sum(range(1, 15))
    assert summary.kernels.eligible_unused_us == 0.0


def test_cpu_only_kernel_stats_are_empty():
    for tables in ([], datatable([("rank", "number")], [])):
        assert read_kernels(tables) == Kernels()
