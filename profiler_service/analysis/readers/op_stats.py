"""Top ops by self time and time by category, from XProf's framework op stats."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from profiler_service.analysis.models import OpCategory, TopOp
from profiler_service.analysis.readers.xprof_tools import rows_as_dicts, table_with_column

# The one place op types map to categories; first match wins, anything else is compute
# (on the device) or other (on the host).
CATEGORY_OF_TYPE: tuple[tuple[OpCategory, tuple[str, ...]], ...] = (
    (
        OpCategory.INPUT,
        (
            "Dataset",
            "Iterator",
            "PyFunc",
            "EagerPyFunc",
            "ParseExample",
            "DecodeJpeg",
            "DecodeImage",
            "DecodePng",
            "ReadFile",
            "TFRecord",
        ),
    ),
    (
        OpCategory.COMMUNICATION,
        (
            "AllReduce",
            "AllGather",
            "ReduceScatter",
            "Collective",
            "Nccl",
            "_Send",
            "_Recv",
            "Send",
            "Recv",
            "AllToAll",
        ),
    ),
    (
        OpCategory.MEMORY,
        (
            "Memcpy",
            "MemcpyHToD",
            "MemcpyDToH",
            "MemcpyDToD",
            "Concat",
            "Pack",
            "Unpack",
            "Stack",
            "TensorList",
            "Transpose",
            "Slice",
            "Split",
            "Gather",
            "Scatter",
            "Tile",
            "Pad",
            "Copy",
            "Identity",
            "Reshape",
            "Cast",
            "Fill",
            "ZerosLike",
            "OnesLike",
        ),
    ),
    (
        OpCategory.COMPUTE,
        (
            "_Mkl",
            "_Fused",
            "Fused",
            "MatMul",
            "BatchMatMul",
            "Conv",
            "Einsum",
            "BiasAdd",
            "Relu",
            "Softmax",
            "Sigmoid",
            "Tanh",
            "Mul",
            "Add",
            "Sub",
            "RealDiv",
            "Sum",
            "Mean",
            "Max",
            "Min",
            "Square",
            "Sqrt",
            "Rsqrt",
            "Exp",
            "Log",
            "Apply",
            "Resource",
            "FusedBatchNorm",
            "LayerNorm",
            "Select",
        ),
    ),
)
TOP_OPS = 10
# Op types that run Python (tf.py_function, tf.numpy_function): in a pipeline, a serial bottleneck.
PYTHON_OP_TYPES = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})


def categorise(op_type: str, host_or_device: str) -> OpCategory:
    for category, prefixes in CATEGORY_OF_TYPE:
        if op_type.startswith(prefixes):
            return category
    return OpCategory.COMPUTE if host_or_device == "Device" else OpCategory.OTHER


def read_ops(tables: list[dict]) -> list[TopOp]:
    """Every op of XProf's framework op stats (IDLE left out), slowest first."""
    # XProf gives two tables: with and without IDLE; only real ops matter here.
    candidates = [t for t in tables if table_with_column([t], "total_self_time")]
    if not candidates:
        return []
    rows = [
        r
        for r in rows_as_dicts(candidates[-1])
        if r.get("type") != "IDLE" and r.get("operation") != "IDLE"
    ]
    side_total_us: dict[str, float] = defaultdict(float)
    for r in rows:
        side_total_us[str(r.get("host_or_device"))] += float(r.get("total_self_time") or 0)
    ops = []
    for r in rows:
        side = str(r.get("host_or_device"))
        self_us = float(r.get("total_self_time") or 0)
        ops.append(
            TopOp(
                name=str(r.get("operation")),
                type=str(r.get("type")),
                host_or_device=side,
                category=categorise(str(r.get("type")), side),
                occurrences=int(r.get("occurrences") or 0),
                self_time_ms=self_us / 1000,
                self_time_share=self_us / side_total_us[side] if side_total_us[side] else 0.0,
                eager=str(r.get("eager")).lower() == "eager",
            )
        )
    ops.sort(key=lambda op: op.self_time_ms, reverse=True)
    return ops


def host_communication_ms(ops: list[TopOp]) -> float:
    """Self time of collectives run on the host (CPU all-reduce: mostly waiting for the peers).

    Device collectives are in the step breakdown already; these are not.
    """
    return sum(
        op.self_time_ms
        for op in ops
        if op.host_or_device == "Host" and op.category is OpCategory.COMMUNICATION
    )


@dataclass
class OpStats:
    """The framework op stats' part: the top ops, time by category, Python in the input."""

    top_ops: list[TopOp]
    op_category_share: dict[str, float]
    python_in_pipeline: bool


def read_op_stats(tables: list[dict], top_k: int = TOP_OPS) -> OpStats | None:
    ops = read_ops(tables)
    if not ops:
        return None
    category_ms: dict[str, float] = defaultdict(float)
    for op in ops:
        category_ms[op.category.value] += op.self_time_ms
    total = sum(category_ms.values())
    return OpStats(
        top_ops=ops[:top_k],
        op_category_share={
            c: round(ms / total, 4) for c, ms in sorted(category_ms.items()) if total
        },
        python_in_pipeline=any(
            op.type in PYTHON_OP_TYPES and op.host_or_device == "Host" for op in ops
        ),
    )
