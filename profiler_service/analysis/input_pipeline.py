"""Which tf.data stage costs most, from XProf's input pipeline analyzer."""

from __future__ import annotations

from profiler_service.analysis.models import InputOp, Summary
from profiler_service.analysis.xprof_tools import as_float, rows_as_dicts, table_with

TOP_INPUT_OPS = 5

# XProf's host-side input time properties -> the stage names we show.
STAGES = {
    "demanded_file_read_us": "file read (on demand)",
    "advanced_file_read_us": "file read (in advance)",
    "preprocessing_us": "preprocessing",
    "enqueue_us": "enqueue",
    "unclassified_nonequeue_us": "unclassified",
}


def summarise_input_pipeline(tables: list[dict], summary: Summary) -> None:
    table = table_with(tables, "preprocessing_us")
    if table is None:
        return
    pipeline = summary.input_pipeline
    pipeline.stage_time_us = {
        name: as_float(table["p"].get(prop)) or 0.0 for prop, name in STAGES.items()
    }
    busiest = max(pipeline.stage_time_us.items(), key=lambda kv: kv[1], default=None)
    pipeline.slowest_stage = busiest[0] if busiest and busiest[1] > 0 else None
    ops = [
        InputOp(
            name=str(row.get("opName")),
            category=str(row.get("category") or ""),
            count=int(row.get("count") or 0),
            self_time_ms=float(row.get("selfTimeInMs") or 0),
            self_time_share=float(row.get("selfTimeInPercent") or 0),
        )
        for row in rows_as_dicts(table)
    ]
    pipeline.slowest_ops = sorted(ops, key=lambda op: op.self_time_ms, reverse=True)[:TOP_INPUT_OPS]
