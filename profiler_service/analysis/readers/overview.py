"""Step time, its breakdown, utilisation and XProf's verdict, from the overview page."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from profiler_service.analysis.models import (
    InputBound,
    StepBreakdown,
    StepSample,
    StepTime,
    Utilisation,
)
from profiler_service.analysis.readers.xprof_tools import as_float, rows_as_dicts, table_with
from profiler_service.analysis.renamed_fields import percent_to_share

MAX_STEP_SAMPLES = 500

# XProf's step-table columns -> our breakdown fields.
_STEP_COLUMNS = {
    "infeedTimeMs": "input_ms",
    "hostComputeTimeMs": "host_compute_ms",
    "deviceComputeTimeMs": "device_compute_ms",
    "kernelLaunchTimeMs": "kernel_launch_ms",
    "deviceToDeviceTimeMs": "device_to_device_ms",
    "deviceCollectivesTimeMs": "collectives_ms",
    "compileTimeMs": "compile_ms",
    "outfeedTimeMs": "output_ms",
    "otherTimeMs": "other_ms",
}
# The same parts as averages in the table's properties.
_AVG_PROPS = {
    "infeed_time_ms_avg": "input_ms",
    "host_compute_time_ms_avg": "host_compute_ms",
    "device_compute_time_ms_avg": "device_compute_ms",
    "kernel_launch_time_ms_avg": "kernel_launch_ms",
    "device_to_device_time_ms_avg": "device_to_device_ms",
    "device_collectives_time_ms_avg": "collectives_ms",
    "compile_time_ms_avg": "compile_ms",
    "outfeed_time_ms_avg": "output_ms",
    "other_time_ms_avg": "other_ms",
}
_CONCLUSION = re.compile(
    r"(?P<level>HIGHLY|MODERATELY|POTENTIALLY|NOT) input-bound because (?:only )?(?P<pct>[\d.]+)%"
)
_FLAGS = ("kernel_launch_bottleneck", "all_other_bottleneck", "device_collectives_bottleneck")


def read_step_time(tables: list[dict]) -> tuple[StepTime, dict]:
    """The step statistics, and the raw properties of XProf's step table."""
    table = table_with(tables, "steptime_ms_average")
    if table is None:
        return StepTime(), {}
    p = table["p"]
    samples = []
    for row in rows_as_dicts(table):
        parts = {field: float(row.get(col) or 0.0) for col, field in _STEP_COLUMNS.items()}
        samples.append(
            StepSample(
                name=str(row.get("stepnum")),
                step_time_ms=float(row.get("stepTimeMs") or 0.0),
                breakdown=StepBreakdown(**parts),
            )
        )
    averages = {field: as_float(p.get(prop)) or 0.0 for prop, field in _AVG_PROPS.items()}
    step_time = StepTime(
        count=len(samples),
        avg_ms=as_float(p.get("steptime_ms_average")) if samples else None,
        min_ms=as_float(p.get("steptime_ms_minimum")) if samples else None,
        max_ms=as_float(p.get("steptime_ms_maximum")) if samples else None,
        stddev_ms=as_float(p.get("steptime_ms_standard_deviation")) if samples else None,
        breakdown_avg=StepBreakdown(**averages),
        steps=samples[:MAX_STEP_SAMPLES],
    )
    return step_time, p


@dataclass
class Overview:
    """The overview page's part of the summary: step time and XProf's verdicts."""

    step_time: StepTime = field(default_factory=StepTime)
    classification: InputBound = InputBound.UNKNOWN  # XProf's input verdict
    input_share: float | None = None  # of step time, waiting for input
    conclusion: str | None = None  # XProf's sentence
    bottleneck: str | None = None
    next_step_advice: str | None = None
    xprof_flags: dict[str, str] = field(default_factory=dict)
    utilisation: Utilisation = field(default_factory=Utilisation)
    notes: list[str] = field(default_factory=list)


def read_overview(tables: list[dict]) -> Overview:
    step_time, step_props = read_step_time(tables)
    part = Overview(step_time=step_time)
    part.conclusion = step_props.get("input_conclusion") or None
    match = _CONCLUSION.search(part.conclusion or "")
    if match and step_time.count:
        part.classification = InputBound(match["level"].lower())
        # A POTENTIALLY sentence quotes the "All Others" share, not the input share.
        if part.classification is not InputBound.POTENTIALLY:
            part.input_share = percent_to_share(float(match["pct"]))
    if part.input_share is None and step_time.count and step_time.avg_ms:
        part.input_share = round(step_time.breakdown_avg.input_ms / step_time.avg_ms, 3)
    part.next_step_advice = step_props.get("summary_nextstep") or None

    verdict = table_with(tables, "bottleneck")
    if verdict is not None:
        part.bottleneck = verdict["p"].get("bottleneck") or None
        part.xprof_flags = {
            flag.removesuffix("_bottleneck"): verdict["p"][flag]
            for flag in _FLAGS
            if verdict["p"].get(flag)
        }
    if not step_time.count:
        part.bottleneck = "unknown"
        part.notes.append(
            "no step markers in the capture: mark steps with ProfilerStepCallback or "
            "training_step() so XProf can analyse step time"
        )

    analysis = table_with(tables, "device_duty_cycle_percent")
    environment = table_with(tables, "device_type")
    u = part.utilisation = Utilisation(
        hardware_type=step_props.get("hardware_type") or None,
        device_type=(environment or {}).get("p", {}).get("device_type"),
    )
    if analysis is not None:
        p = analysis["p"]
        # XProf's figures are percentages: read as shares.
        u.device_duty_cycle_share = percent_to_share(as_float(p.get("device_duty_cycle_percent")))
        u.device_idle_share = percent_to_share(as_float(p.get("device_idle_time_percent")))
        u.host_idle_share = percent_to_share(as_float(p.get("host_idle_time_percent")))
        u.host_eager_share = percent_to_share(as_float(p.get("host_op_time_eager_percent")))
        u.device_eager_share = percent_to_share(as_float(p.get("device_op_time_eager_percent")))
    precision = table_with(tables, "device_compute_16bit_percent")
    if precision is not None and u.hardware_type not in (None, "CPU_ONLY"):
        u.device_compute_16bit_pct = as_float(precision["p"].get("device_compute_16bit_percent"))
        u.device_compute_32bit_pct = as_float(precision["p"].get("device_compute_32bit_percent"))
        u.precision_statement = (verdict or {}).get("p", {}).get("precision_statement") or None
    return part
