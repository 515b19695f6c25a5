"""What each reader of one analysis returns, and the one function that assembles the Summary.

Every reader (overview.py, input_pipeline.py, op_stats.py, kernels.py, memory.py, the host
events, gpu_activity.py, python_stacks.py) returns its own part and writes nowhere else;
`assemble` is the only place a Summary is put together, so where a field comes from, and which
source wins where two speak of one thing (the input pipeline: XProf's verdict from the overview,
its stages from the input pipeline analyzer, Python in it from the op stats, the iterators'
parallelism from the host events), reads from top to bottom here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from profiler_service.analysis.models import (
    AllocatorMemory,
    EagerDispatch,
    GpuActivity,
    HostSummary,
    InputPipeline,
    Kernels,
    MemoryUnrecorded,
    PythonStacks,
    Summary,
    TfFunctions,
)
from profiler_service.analysis.readers.input_pipeline import add_iterator_stats
from profiler_service.analysis.readers.op_stats import OpStats
from profiler_service.analysis.readers.overview import Overview


@dataclass
class Parts:
    """One analysis's parts, as its readers returned them."""

    hosts: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    overview: Overview = field(default_factory=Overview)  # step time made per training step
    input_pipeline: InputPipeline | None = None  # XProf's input pipeline analyzer
    op_stats: OpStats | None = None
    kernels: Kernels = field(default_factory=Kernels)
    memory: list[AllocatorMemory] = field(default_factory=list)  # every host's, in order
    memory_unrecorded: MemoryUnrecorded | None = None  # hosts without allocator events
    # Each host's iterator stats from its events (path -> stats), in the hosts' order.
    iterator_stats: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    tf_functions: TfFunctions | None = None
    eager: EagerDispatch | None = None  # the first host's eager ops in its steps
    gpu: GpuActivity | None = None
    framework: str | None = None  # framework.Framework, from the first host's capture
    per_host: list[HostSummary] = field(default_factory=list)
    python_stacks: PythonStacks | None = None  # the agent's sampled stacks, where it took them
    notes: list[str] = field(default_factory=list)  # what could not be read, in reading order


def assemble(parts: Parts) -> Summary:
    """The Summary from its parts."""
    overview, op_stats = parts.overview, parts.op_stats
    pipeline = (parts.input_pipeline or InputPipeline()).model_copy(
        update={
            "classification": overview.classification,
            "input_share": overview.input_share,
            "conclusion": overview.conclusion,
            "python_in_pipeline": op_stats.python_in_pipeline if op_stats else False,
        }
    )
    for stats in parts.iterator_stats:  # the first host whose stats name the iterators
        if any(i.datasets for i in pipeline.iterators):
            break
        if stats:
            add_iterator_stats(pipeline, stats)
    return Summary(
        tools=parts.tools,
        hosts=parts.hosts,
        framework=parts.framework,
        bottleneck=overview.bottleneck,
        next_step_advice=overview.next_step_advice,
        step_time=overview.step_time,
        input_pipeline=pipeline,
        utilisation=overview.utilisation,
        top_ops=op_stats.top_ops if op_stats else [],
        op_category_share=op_stats.op_category_share if op_stats else {},
        memory=parts.memory,
        memory_unrecorded=parts.memory_unrecorded,
        kernels=parts.kernels,
        per_host=parts.per_host,
        xprof_flags=overview.xprof_flags,
        notes=[*overview.notes, *parts.notes],
        gpu=parts.gpu,
        tf_functions=parts.tf_functions,
        eager=parts.eager,
        python_stacks=parts.python_stacks,
    )
