"""What each change to a tf.data pipeline saves, alone and together (`input_bound`'s impact).

The step waits W for each batch and computes C = step - W. A pipeline that does not run ahead
makes each batch while the step waits: its work per batch is W p (p the slowest stage's
parallelism now); one that runs ahead (`prefetch`) already overlaps C, so its work is (W + C) p.
The changes the finding can advise, as the pipeline's own reading names them
(pipeline_advice.py), and what each does to that work:

- `python`: the Python in the pipeline becomes TensorFlow ops. The Python is taken as the whole
  pipeline's work (the expensive stage is the Python map); TF ops do the same work in
  `TF_OPS_COST_OF_PYTHON` of its time (vectorised, no interpreter, no GIL).
- `parallel_calls`: the slowest stage runs on P cores (the job's cores less those its other
  threads keep busy), not p. Python that stays holds the GIL for the share of time it computes
  (the job's cores used before the capture, at most 1: I/O and numpy release it), and that
  share stays serial at the least; the least also allows for the parallel pipeline's own cost
  (`INPUT_PARALLEL_OVERHEAD` of the step), the most for the per-element hand-overs of the
  sequential one that it hides (`INPUT_SEQUENTIAL_OVERHEAD` of its batch time).
- `prefetch` (or `prefetch_last`): the pipeline runs ahead of the step: the step is
  max(C, T, all the CPU work / P) instead of C + T, T the pipeline's time a batch; at the most
  max(C, T), where the step's compute leaves its cores to the pipeline.

Every combination of the changes the pipeline lacks is predicted (at most seven), so the
verification can hold a fix against the changes the next capture shows were made. The finding's
own saving is all of them together.
"""

from __future__ import annotations

from itertools import combinations

from profiler_service.analysis.evidence import InputBoundEvidence
from profiler_service.analysis.models import ActionSaving, Finding, Impact, Summary

__all__ = [
    "ACTION_LABELS",
    "INPUT_PARALLEL_OVERHEAD",
    "input_wait",
    "modelled_actions",
]

# tf.data's AUTOTUNE runs a parallel map on at most this many calls however many cores the job
# has (it bounds them by the cores; beyond a few dozen the pipeline's other stages bound it).
INPUT_MAX_PARALLELISM = 32
# The cores assumed where the capture was analysed away from the job (`analyze`): the fewest a
# training host has.
INPUT_CORES_ASSUMED = 2.0
# What a parallel, prefetched tf.data pipeline costs beyond its work (its threads, buffers and
# hand-overs): measured on a CPU-bound map made parallel on 2 cores, traced, 1.11-1.23x the
# step its work over the cores gives with oneDNN on (7 fixed twins: 6.9 ms against 6.1 to 7.9
# against 6.4), 0.99-1.37x with it off (a CPU without AVX-512, 5 twins: 9.54 ms against 6.96
# the worst); a margin above the most seen. The least a parallel map saves allows for it.
INPUT_PARALLEL_OVERHEAD = 0.5
# A sequential pipeline's wait holds more than its work spread over the calls: each element's
# hand-over to the training thread, one at a time. A parallel one hides up to this share of it:
# the most a parallel map saves allows for it. Measured on the demo's Python-decoding twins,
# traced (3 pairs): the parallel step 0.97-1.06x the wait over the cores; a margin below the
# least seen.
INPUT_SEQUENTIAL_OVERHEAD = 0.1
# Python in the pipeline computes, holding the GIL, where the job keeps at least this share
# of a core busy beyond its step's compute for each second of input wait (the look-back's
# cores used): a sequential pipeline's Python that computes all the time keeps one core busy.
# Python that waits (storage, sleep) or calls native code (numpy, PIL) releases the GIL.
PYTHON_COMPUTES_SHARE = 0.8
# The share of the step's own compute that waited for the GIL held by the pipeline's computing
# Python, given back once the Python is TF ops. Fitted on the calibration half of
# bench/calibration's pairs (docs/findings.md: the pairs, the fit, the held-out figures).
GIL_WAIT_SHARE = 1.0
# The time TF ops take for the work Python did in the pipeline (point, least saving's, most
# saving's): not fitted (with GIL_WAIT_SHARE, one pair of the calibration half cannot tell
# them apart); the held-out pairs that moved it measured inside their ranges.
TF_OPS_COST_OF_PYTHON = (0.1, 0.5, 0.0)

ACTION_LABELS = {
    "python": "the Python moved into TF ops",
    "parallel_calls": "the map made parallel",
    "prefetch": "a prefetch at the end",
}
_PREFETCH = ("prefetch", "prefetch_last")


def modelled_actions(lacks: list[str]) -> list[str]:
    """The changes of `lacks` (the pipeline's reading) this model predicts, in ACTION_LABELS'
    order; `prefetch_last` is a prefetch."""
    codes = {"prefetch" if code in _PREFETCH else code for code in lacks}
    return [code for code in ACTION_LABELS if code in codes]


def input_wait(finding: Finding, summary: Summary) -> Impact:
    """The finding's saving is every change the pipeline lacks, together (parallel calls and a
    prefetch where the pipeline was not read); `actions` holds each combination's."""
    now = summary.step_time.avg_ms
    evidence = InputBoundEvidence.model_validate(finding.evidence)
    wait_share = min(max(evidence.input_share_pct / 100, 0.0), 1.0)
    if not now or wait_share <= 0:
        return Impact(
            step_ms_now=now,
            step_ms_after=now,
            basis="Saves nothing measurable in step time: the capture holds no step time to "
            "save from.",
        )
    job = _Job.read(summary, evidence, now, wait_share)
    actions = modelled_actions(evidence.pipeline_lacks) or ["parallel_calls", "prefetch"]
    every = [
        job.predict(chosen)
        for size in range(1, len(actions) + 1)
        for chosen in combinations(actions, size)
    ]
    whole = every[-1]
    on_gpu = evidence.source == "gpu_idle_in_iterator"
    where = "the GPU's idle time in the tf.data iterator" if on_gpu else "the input wait"
    return Impact(
        step_ms_now=now,
        step_ms_after=whole.step_ms_after,
        saving_share=whole.saving_share,
        saving_range=whole.saving_range,
        actions=every if evidence.pipeline_lacks else [],
        basis=(
            f"The fix runs the pipeline ahead of the step: {where} ({job.wait:.3g} ms of "
            f"{now:.3g}) is made on {job.cores:g} core(s) ({job.cores_source}) beside the "
            f"step's own {job.compute:.3g} ms."
            + (
                " Python that computes holds the GIL"
                + (f" ({job.gil:.0%} of its time, by the job's cores used)" if job.gil else "")
                + " and stays serial at the least."
                if evidence.python_in_pipeline and "python" not in actions
                else ""
            )
        ),
    )


class _Job:
    """What the capture says of the job's step and pipeline, and each change's step after."""

    def __init__(self, now: float, wait: float, cores: float, source: str, p_now: float):
        self.now, self.wait, self.compute = now, wait, now - wait
        self.cores, self.cores_source, self.p_now = cores, source, p_now
        self.prefetched = False
        self.python = False
        # The share of the Python's time it computes, holding the GIL; None: unknown (`analyze`).
        self.gil: float | None = None

    @classmethod
    def read(
        cls, summary: Summary, evidence: InputBoundEvidence, now: float, wait_share: float
    ) -> _Job:
        cores, source = _cores_for_input(summary)
        job = cls(now, now * wait_share, cores, source, min(_slowest_parallelism(summary), cores))
        job.prefetched = bool(evidence.pipeline_lacks) and not any(
            code in evidence.pipeline_lacks for code in _PREFETCH
        )
        job.python = evidence.python_in_pipeline
        cpu = summary.process_cpu
        # The job's own cores used (a host's, read by a sidecar elsewhere, say nothing of it).
        used = cpu.cores_used if cpu is not None and cpu.source in ("agent", "proc") else None
        if used is not None:  # the cores the job keeps busy beyond its step's compute
            job.gil = min(1.0, max(0.0, (used - (1 - wait_share)) / max(wait_share, 1e-9)))
        return job

    @property
    def computes(self) -> bool:
        """Its Python computes (keeps a core busy) rather than waits: it holds the GIL."""
        return self.python and self.gil is not None and self.gil >= PYTHON_COMPUTES_SHARE

    def predict(self, chosen: tuple[str, ...]) -> ActionSaving:
        point, least, most = (self._step(chosen, variant) for variant in range(3))
        point = min(self.now, point)  # a change predicted to slow the step: nothing saved
        least, most = max(least, point), min(most, point)
        return ActionSaving(
            action="+".join(chosen),
            step_ms_after=round(point, 3),
            saving_share=round(1 - point / self.now, 4),
            saving_range=(round(1 - least / self.now, 4), round(1 - most / self.now, 4)),
        )

    def _step(self, chosen: tuple[str, ...], variant: int) -> float:
        """The step after `chosen`: variant 0 the point, 1 the least saving, 2 the most."""
        work = (self.wait + (self.compute if self.prefetched else 0.0)) * self.p_now
        python_work = work if self.python else 0.0
        tf_work = work - python_work
        compute = self.compute
        if "python" in chosen:
            tf_work += python_work * TF_OPS_COST_OF_PYTHON[variant]
            python_work = 0.0
            if self.computes and variant != 1:  # the step no longer waits for the GIL
                compute *= 1 - GIL_WAIT_SHARE
        parallel = "parallel_calls" in chosen
        width = self.cores if parallel else self.p_now
        ahead = self.prefetched or "prefetch" in chosen or (parallel and variant == 2)
        # The Python's share that stays serial: all of it where it computes (the point), its
        # measured share at the least (all where unknown), none at the most.

        def step(held: float) -> float:
            batch = (tf_work + python_work * (1 - held)) / width + python_work * held
            if variant == 2 and (parallel or ahead):
                batch *= 1 - INPUT_SEQUENTIAL_OVERHEAD
            if not ahead:
                return compute + batch
            if variant == 2:  # the most: the step's compute left its cores to the pipeline
                return max(compute, batch)
            return max(compute, batch, (compute + tf_work + python_work) / self.cores)

        if variant == 0:
            return step(1.0 if self.computes else 0.0)
        if variant == 2:
            return step(0.0)
        serial = step(1.0 if self.gil is None else self.gil)
        if not parallel:
            return serial
        # The least allows for a parallel pipeline's own work on the step's cores, or the
        # Python's serial share, whichever is slower (it may then be slower than now).
        return max(step(0.0) * (1 + INPUT_PARALLEL_OVERHEAD), serial)


def _slowest_parallelism(summary: Summary) -> float:
    """The parallelism of the iterator that takes the most time (1: sequential)."""
    iterators = summary.input_pipeline.iterators
    if not iterators:
        return 1.0
    slowest = max(iterators, key=lambda i: i.self_time_ms)
    return float(slowest.parallelism or 1)


def _cores_for_input(summary: Summary) -> tuple[float, str]:
    """The parallel calls a pipeline can use: the job's cores less those its threads keep busy
    besides the one the sequential pipeline uses, at least 1, at most
    `INPUT_MAX_PARALLELISM`; `INPUT_CORES_ASSUMED` where they are unknown."""
    cpu = summary.process_cpu
    if cpu is None:  # `analyze` of a capture taken elsewhere
        return INPUT_CORES_ASSUMED, f"the job's cores unknown: {INPUT_CORES_ASSUMED:g} assumed"
    free = cpu.cores_available
    if cpu.cores_used is not None:
        free = min(free, cpu.cores_available - cpu.cores_used + 1)
    where = {"agent": "the job's cores", "proc": "the job's cores"}.get(
        cpu.source, "this host's cores"
    )
    return max(1.0, min(free, INPUT_MAX_PARALLELISM)), where
