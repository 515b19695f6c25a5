"""The analysed summary and the findings: typed, stored in `snapshot.json`, served by the API.
The summary's memory, device and Python-stack parts are modelled in memory_models.py,
device_models.py and stack_models.py (re-exported here: every reader imports the summary's models
from this module).

Units are in the names (`_ms`, `_us`, `_bytes`, `_share` for 0-1; the few `_pct` left, 0-100,
are XProf's own figures read as it gives them). A field renamed from `_pct` to `_share` is
still read in its old spelling (renamed_fields.py).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, Field, model_validator

from profiler_service.analysis.device_models import (
    GpuActivity,
    GpuCopies,
    GpuDevice,
    GpuKernels,
    HostActivity,
    HostLane,
    Kernel,
    Kernels,
)
from profiler_service.analysis.memory_models import (
    AllocatorMemory,
    KeptAllocation,
    MemoryGrowth,
    MemoryPoint,
    MemoryUnrecorded,
    OpAllocations,
    PeakAllocation,
)
from profiler_service.analysis.renamed_fields import (
    EVIDENCE_RENAMES,
    ReadsOldPercentages,
    read_old_percentages,
)
from profiler_service.analysis.stack_models import CodeLine, CodeSite, PythonStacks

__all__ = [
    "AllocatorMemory",
    "CodeLine",
    "CodeSite",
    "EagerDispatch",
    "Finding",
    "GpuActivity",
    "GpuCopies",
    "GpuDevice",
    "GpuKernels",
    "HostActivity",
    "HostLane",
    "HostSummary",
    "Impact",
    "InputBound",
    "InputIterator",
    "InputOp",
    "InputPipeline",
    "KeptAllocation",
    "Kernel",
    "Kernels",
    "MemoryGrowth",
    "MemoryPoint",
    "MemoryUnrecorded",
    "OpAllocations",
    "OpCategory",
    "PeakAllocation",
    "ProcessCpu",
    "ProcessMemory",
    "PythonStacks",
    "Severity",
    "StepBreakdown",
    "StepSample",
    "StepTime",
    "Summary",
    "TfFunctionCalls",
    "TfFunctions",
    "TopOp",
    "Utilisation",
]


class StepBreakdown(BaseModel):
    """Where a step's time goes, in ms (XProf's step-time table; averages or one step)."""

    input_ms: float = 0.0
    host_compute_ms: float = 0.0
    device_compute_ms: float = 0.0
    kernel_launch_ms: float = 0.0
    device_to_device_ms: float = 0.0
    collectives_ms: float = 0.0
    compile_ms: float = 0.0
    output_ms: float = 0.0
    other_ms: float = 0.0
    # From one marked step's end to the next one's start: the training loop's own Python
    # outside every marker (Keras 2's fit() marks only the call), which XProf's table leaves
    # out and the job's clock counts (step_markers.py: add_time_between_markers).
    between_steps_ms: float = 0.0


class StepSample(BaseModel):
    name: str
    step_time_ms: float
    breakdown: StepBreakdown


class StepTime(BaseModel):
    # Training steps in the capture: the marked steps XProf timed and the first and last it sets
    # aside as maybe incomplete, times `steps_per_marker` (analysis/readers/step_markers.py).
    count: int = 0
    # Training steps one marked step holds (Keras `steps_per_execution`), from the gap between
    # the markers' step numbers; every figure here is per training step.
    steps_per_marker: int = 1
    markers: int = 0  # the marked steps (calls) XProf timed: the rows behind `steps`
    # The examples one training step takes, where the job's markers say (`training_step(i,
    # examples=...)`): two captures whose batches differ are compared by time per example.
    examples_per_step: float | None = None
    avg_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    stddev_ms: float | None = None
    breakdown_avg: StepBreakdown = Field(default_factory=StepBreakdown)
    steps: list[StepSample] = Field(default_factory=list)  # the first MAX_STEP_SAMPLES


class InputBound(StrEnum):
    """XProf's own classification (op_stats_to_input_pipeline_analysis.cc: 20 % / 5 %)."""

    HIGHLY = "highly"
    MODERATELY = "moderately"
    POTENTIALLY = "potentially"  # input is small, but "All Others" time may hide I/O or Python
    NOT = "not"
    UNKNOWN = "unknown"


class InputOp(BaseModel):
    name: str
    category: str
    count: int
    self_time_ms: float
    self_time_share: float


class InputIterator(BaseModel):
    """One tf.data iterator, as XProf's input pipeline analyzer names it: the path from the root
    (`Iterator::Root::Prefetch::MapAndBatch`, indices like `[3]` removed) says the pipeline's
    shape after tf.data's own rewrites. Its parallelism is read from the capture's iterator
    events, which XProf does not report."""

    path: str
    self_time_ms: float
    parallelism: int | None = None
    autotune: bool | None = None
    datasets: str = ""  # the datasets it runs, as the job built them: "fused(MapDataset:1,...)"


class InputPipeline(ReadsOldPercentages):
    old_percentages: ClassVar[dict[str, str]] = {"input_share_pct": "input_share"}

    classification: InputBound = InputBound.UNKNOWN
    input_share: float | None = None  # of step time, waiting for input
    conclusion: str | None = None  # XProf's sentence
    # Host-side input time by tf.data stage (XProf's input pipeline analyzer), in µs.
    stage_time_us: dict[str, float] = Field(default_factory=dict)
    slowest_stage: str | None = None
    slowest_ops: list[InputOp] = Field(default_factory=list)
    python_in_pipeline: bool = False  # py_function / numpy_function in the slowest input ops
    # Every iterator XProf's input pipeline analyzer names (self time summed over indices).
    iterators: list[InputIterator] = Field(default_factory=list)


class Utilisation(ReadsOldPercentages):
    old_percentages: ClassVar[dict[str, str]] = {
        "device_duty_cycle_pct": "device_duty_cycle_share",
        "device_idle_pct": "device_idle_share",
        "host_idle_pct": "host_idle_share",
        "host_eager_pct": "host_eager_share",
        "device_eager_pct": "device_eager_share",
    }

    hardware_type: str | None = None  # CPU_ONLY, GPU, TPU
    device_type: str | None = None
    device_duty_cycle_share: float | None = None
    device_idle_share: float | None = None
    host_idle_share: float | None = None
    host_eager_share: float | None = None  # of host op time, executed eagerly
    device_eager_share: float | None = None
    # Device compute time in 16-bit and 32-bit ops, and XProf's sentence when 16-bit is low.
    device_compute_16bit_pct: float | None = None
    device_compute_32bit_pct: float | None = None
    precision_statement: str | None = None


class OpCategory(StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    INPUT = "input"
    OTHER = "other"


class TopOp(BaseModel):
    name: str
    type: str
    host_or_device: str
    category: OpCategory
    occurrences: int
    self_time_ms: float
    self_time_share: float  # of all op time on its side (host or device)
    eager: bool = False


class ProcessMemory(BaseModel):
    """The job process's resident memory and the limit that kills it (from the look-back
    sampler, not XProf): on a CPU allocator this, not the host's memory, is the capacity."""

    rss_bytes: int
    limit_bytes: int
    source: str  # agent (the job itself) or proc (the sidecar reading the job's /proc)


class ProcessCpu(BaseModel):
    """The cores the job used before the capture and the cores it may use (its cgroup quota or
    affinity), from the look-back sampler, else this service's own host: what a fix that
    parallelises the job's work can win (analysis/input_impact.py)."""

    cores_available: float
    cores_used: float | None = None
    source: str  # agent, proc (the job's /proc) or service (this process: the job's unknown)


class TfFunctionCalls(BaseModel):
    """One tf.function's calls in the capture. TF records with each call whether it traced (built
    a new concrete function, `__inference_<name>_<id>`) and whether XLA compiles it; XProf reads
    these into its tf-function statistics but its tools do not report them."""

    name: str
    calls: int
    traces: int  # calls that traced it again
    tracing_ms: float  # in those calls, time not spent running it: graph building, instantiation
    # A call's whole time, on average, for the calls that traced and those that did not (None
    # where there were none), and of the latter the time running the graph: what a trace adds.
    traced_call_ms: float | None = None
    untraced_call_ms: float | None = None
    untraced_run_ms: float | None = None
    # A call that neither traced nor compiled, on average: what every call costs once the
    # function keeps one trace and one shape (None where no call was such).
    steady_call_ms: float | None = None
    calls_ms: float = 0.0  # all its calls' time in the capture
    traced_in_all: int | None = None  # TF's own count of its traces, at its last call
    jit_compile: bool = False
    compiles: int = 0  # XLA compilations during its calls
    compile_ms: float = 0.0  # from the compiled op's start to the end of XLA's backend
    # Over the steps marked in the capture (traces or compiles inside them / their count).
    traces_per_step: float | None = None
    compiles_per_step: float | None = None


class EagerDispatch(BaseModel):
    """Ops run eagerly inside the marked steps, per step, from the capture's own events
    (eager_dispatch.py): XProf reports the eager share only on GPUs."""

    steps: int
    step_ms: float  # the marked steps' time, per step
    ops_per_step: float
    dispatch_ms_per_step: float  # in the ops' Python entries and dispatch, kernels included
    kernel_ms_per_step: float  # in their kernels' runs: what a graph keeps
    in_tf_function: bool = False  # the steps also call tf.functions: eager ops around them

    @property
    def dispatch_share(self) -> float:
        return self.dispatch_ms_per_step / self.step_ms if self.step_ms else 0.0


class TfFunctions(BaseModel):
    """The tf.function calls and XLA compilations of the capture's busiest host."""

    host: str
    span_ms: float  # of the host events read: the capture's length
    functions: list[TfFunctionCalls] = Field(default_factory=list)


class HostSummary(ReadsOldPercentages):
    """One worker of a multi-host capture, analysed on its own."""

    old_percentages: ClassVar[dict[str, str]] = {"input_share_pct": "input_share"}

    host: str
    step_count: int = 0
    step_time_ms_avg: float | None = None
    input_share: float | None = None  # of step time, waiting for input
    breakdown_avg: StepBreakdown = Field(default_factory=StepBreakdown)
    # Collectives run on the host per step (a CPU all-reduce): XProf counts them as host
    # compute, but on a fast worker they are mostly waiting for the slow one.
    host_collectives_ms_avg: float = 0.0
    # Step time minus time waiting on the others ("All Others" and collectives, device and
    # host): in a synchronous job every worker's step is as long as the slowest one's busy time.
    busy_ms_avg: float | None = None


class Summary(BaseModel):
    """Everything the findings are drawn from; XProf computes, this only reads."""

    tools: list[str] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)
    # What ran the job (framework.Framework): tensorflow, keras2, keras3-tensorflow, keras3-jax,
    # jax, unknown; None for an analysis older than the reading.
    framework: str | None = None
    bottleneck: str | None = None  # XProf's verdict: input, host, device, unknown
    next_step_advice: str | None = None
    step_time: StepTime = Field(default_factory=StepTime)
    input_pipeline: InputPipeline = Field(default_factory=InputPipeline)
    utilisation: Utilisation = Field(default_factory=Utilisation)
    top_ops: list[TopOp] = Field(default_factory=list)
    op_category_share: dict[str, float] = Field(default_factory=dict)
    memory: list[AllocatorMemory] = Field(default_factory=list)
    memory_unrecorded: MemoryUnrecorded | None = None  # hosts with no allocator event
    kernels: Kernels = Field(default_factory=Kernels)
    per_host: list[HostSummary] = Field(default_factory=list)
    process_memory: ProcessMemory | None = None  # when the look-back sampler read the job
    process_cpu: ProcessCpu | None = None  # the job's cores, or this service's host's
    # XProf's own bottleneck flags (kernel launch, all others, collectives): "high"/"moderate"/...
    xprof_flags: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)  # what could not be read, and why
    gpu: GpuActivity | None = None  # what each GPU and its host did (None without a GPU)
    tf_functions: TfFunctions | None = None  # from the capture's own events (tf_functions.py)
    eager: EagerDispatch | None = None  # ops run eagerly in the steps (eager_dispatch.py)
    # The job's Python stacks sampled during the trace (the agent's), read (python_stacks.py).
    python_stacks: PythonStacks | None = None

    @property
    def device_idle_share(self) -> float | None:
        """XProf's device idle share, or, on GPUs where it gives none, the GPUs' own."""
        if self.utilisation.device_idle_share is not None:
            return self.utilisation.device_idle_share
        return self.gpu.idle_share if self.gpu is not None else None


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"critical": 0, "warning": 1, "info": 2}[self.value]


class ActionSaving(BaseModel):
    """One change (or several together) of those a finding recommends, and what it saves on its
    own: the verification holds a fix against the changes the next capture shows were made."""

    action: str  # codes joined by '+': python, parallel_calls, prefetch (input_impact.py)
    step_ms_after: float | None = None
    saving_share: float = 0.0
    saving_range: tuple[float, float] = (0.0, 0.0)


class Impact(BaseModel):
    """What a finding costs and what its fix would save, by its rule's model (impact.py)."""

    step_ms_now: float | None = None  # the step time the capture measured
    step_ms_after: float | None = None  # predicted once the finding is fixed
    saving_share: float = 0.0  # of step time, the prediction's point (0: nothing measurable)
    saving_range: tuple[float, float] = (0.0, 0.0)  # the least and the most the fix saves
    # Of the GPUs the job holds, the share the fix lets it give back (GPUs that ran nothing):
    # GPU-hours returned, where the step is no shorter.
    returned_gpu_share: float = 0.0
    basis: str = ""  # what the fix removes and what remains
    # Each change the recommendation names, alone and together; the last is all of them, the
    # finding's own saving. Empty where the fix is one change.
    actions: list[ActionSaving] = Field(default_factory=list)

    def action(self, code: str) -> ActionSaving | None:
        return next((a for a in self.actions if a.action == code), None)

    @property
    def gpu_hours_share(self) -> float:
        """The share of the job's GPU-hours the fix gives back: its steps' saving, or the GPUs
        it returns (a job that uses all it holds returns none)."""
        return max(self.saving_share, self.returned_gpu_share)


class Finding(BaseModel):
    rule: str = ""  # stamped by the registry (findings/registry.py): a `Rule`'s value
    severity: Severity
    title: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    recommendation: str = ""
    docs: str | None = None
    # Share of step time this finding explains (0-1): what is at stake, not all of it saved.
    impact_share: float = 0.0
    impact: Impact | None = None  # set by the registry from the rule's model (impact.py)
    # The user's code the finding's cause is in, most samples first (analysis/where.py): set by
    # the registry where the capture holds the job's Python stacks; empty where it holds none.
    where: list[CodeSite] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _read_old_evidence(cls, data: Any) -> Any:
        """A finding stored before its evidence's percentages became shares reads as a share."""
        if not isinstance(data, dict) or not isinstance(data.get("evidence"), dict):
            return data
        renames = EVIDENCE_RENAMES.get(str(data.get("rule") or ""))
        if not renames:
            return data
        return {**data, "evidence": read_old_percentages(data["evidence"], renames)}
