"""GPU kernels and Tensor Core use, from XProf's kernel stats (empty without a GPU)."""

from __future__ import annotations

from profiler_service.analysis.models import Kernel, Kernels
from profiler_service.analysis.readers.xprof_tools import rows_as_dicts, table_with_column

TOP_KERNELS = 10


def read_kernels(tables: list[dict] | dict) -> Kernels:
    tables = tables if isinstance(tables, list) else [tables]
    table = table_with_column(tables, "kernel_name")
    if table is None:
        return Kernels()
    kernels = [
        Kernel(
            name=str(r.get("kernel_name")),
            op_name=str(r.get("op_name") or ""),
            occurrences=int(r.get("occurrences") or 0),
            total_us=float(r.get("total_duration_us") or 0),
            tensor_core_eligible=bool(r.get("is_op_tensor_core_eligible")),
            uses_tensor_core=bool(r.get("is_kernel_using_tensor_core")),
        )
        for r in rows_as_dicts(table)
    ]
    kernels.sort(key=lambda k: k.total_us, reverse=True)
    return Kernels(
        total_us=sum(k.total_us for k in kernels),
        top=kernels[:TOP_KERNELS],
        eligible_unused_us=sum(
            k.total_us for k in kernels if k.tensor_core_eligible and not k.uses_tensor_core
        ),
    )
