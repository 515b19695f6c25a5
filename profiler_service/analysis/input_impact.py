"""What each change to a tf.data pipeline saves, alone and together (`input_bound`'s impact).

The step waits W for each batch and computes C = step - W. A pipeline that does not run ahead
makes each batch while the step waits: its work per batch is W p (p the slowest stage's
parallelism now); one that runs ahead (`prefetch`) already overlaps C, so its work is (W + C) p.
The changes the finding can advise, as the pipeline's own reading names them
(pipeline_advice.py), and what each does to that work:

- `python`: the Python in the pipeline becomes TensorFlow ops. The Python is taken as the whole
  pipeline's work (the expensive stage is the Python map); TF ops do the same work in
  `TF_OPS_COST_OF_PYTHON` of its time (vectorised, no interpreter, no GIL), and the step's own
  compute stops waiting for the GIL the Python held (`GIL_WAIT_SHARE` of it).
- `parallel_calls`: the slowest stage runs on P cores (the job's cores less those its other
  threads keep busy), not p. Python that computes (it keeps a core busy: the job's cores used
  before the capture) holds the GIL and stays serial, and its threads now run beside the
  training loop, whose thread must win the GIL back from them each time it returns from
  TensorFlow (a GIL convoy): with a second core to contend from, the step grows by
  `GIL_CONVOY_SHARE` of the Python's time. Python that waits or calls native code
  releases it and is spread like TF ops. Numpy keeps a core busy too, so where the agent's
  stacks were sampled they decide: its sampler needs the GIL to read a thread's frames, so it
  sees the pipeline's Python at the user's own lines only where that Python let the GIL go
  there (numpy's loops, a sleep, a read); Python that computes lets it go only on leaving, in
  TensorFlow's wrapper (`pipeline_library_share` near 1). A function that computes for longer
  than the switch interval (5 ms) at a time is made to let go inside it, and reads as native.
- `prefetch` (or `prefetch_last`): the pipeline runs ahead of the step, making the next batch
  (T, its time a batch) while the step computes C, as fast as the cores the compute leaves free
  let it: the cores used before, less the pipeline's, over C say how many the compute keeps
  busy (TF ops on intra-op threads: on a small CPU host, all of them; on a GPU job, few). The
  pipeline's waiting (a sleep, a read) needs no core and overlaps whole. The step is C + T less
  that overlap, and no shorter than the work the job's threads did a step (the cores used
  times the step) over the cores the job may use. Computing Python behind a prefetch runs
  beside the loop: a GIL convoy, as above.

The model gives a point; the range is that point plus the spread of measured savings about it
(`SAVING_SPREAD`: measured - predicted on the calibration half of bench/calibration's pairs,
split conformal), so it holds about 80 % of fixes measured. The spread counts both
what the model misses and what two captures of fresh jobs differ by. It was measured where the
job's own cores and their use were read (the agent; a sidecar reading the job's /proc); where
they were not, the job's threads may already keep every core busy (TF ops in a map run on
intra-op threads), and the range's low end is the point with no core to spare.

Every combination of the changes the pipeline lacks is predicted (at most seven), so the
verification can hold a fix against the changes the next capture shows were made. The finding's
own saving is all of them together.
"""

from __future__ import annotations

from itertools import combinations

from profiler_service.analysis.input_evidence import InputBoundEvidence
from profiler_service.analysis.models import ActionSaving, Finding, Impact, Summary

__all__ = [
    "ACTION_LABELS",
    "SAVING_SPREAD",
    "input_wait",
    "modelled_actions",
]

# tf.data's AUTOTUNE runs a parallel map on at most this many calls however many cores the job
# has (it bounds them by the cores; beyond a few dozen the pipeline's other stages bound it).
INPUT_MAX_PARALLELISM = 32
# The cores assumed where the capture was analysed away from the job (`analyze`): the fewest a
# training host has.
INPUT_CORES_ASSUMED = 2.0
# Python in the pipeline computes, holding the GIL, where the job keeps at least this share
# of a core busy beyond its step's compute for each second of input wait (the look-back's
# cores used): a sequential pipeline's Python that computes all the time keeps one core busy.
# Python that waits (storage, sleep) releases the GIL; native code (numpy, PIL) does too but
# keeps a core busy, so it reads as computing Python by the cores used alone (the agent's stacks
# tell them apart: GIL_HELD_LIBRARY_SHARE).
PYTHON_COMPUTES_SHARE = 0.8
# The agent's samples of the pipeline's Python that decide whether it holds the GIL (fewer: the
# cores used alone decide), and the share of them in library frames above which it does.
GIL_JUDGED_SAMPLES = 10
GIL_HELD_LIBRARY_SHARE = 0.5
# The share of the step's own compute that waited for the GIL held by the pipeline's computing
# Python, given back once the Python is TF ops. Fitted on bench/calibration/corpus-3.json and
# corpus-4.json (by grid: the least median error on their pairs that moved computing Python
# into TF ops; bench_calibration.fit; docs/findings.md: the figures on the corpus captured
# after).
GIL_WAIT_SHARE = 0.85
# The share of the pipeline's GIL-holding Python time by which the step grows where that Python
# runs beside the training loop (parallel calls, a prefetch) with a second core to contend
# from. Fitted (bench_calibration.fit, by grid: the least median error) on the 6 pairs of
# bench/calibration/corpus-3.json and corpus-4.json that did so, which measured 4 % to 56 %
# slower: parallel calls cost more than a prefetch (two Python threads beside the loop, not
# one), which one share does not tell apart.
GIL_CONVOY_SHARE = 0.35
# The time TF ops take for the work Python did in the pipeline: a tenth (vectorised on a batch,
# no interpreter); a change that moved it saves almost all of it either way, so it is not fitted.
TF_OPS_COST_OF_PYTHON = 0.1
# Measured - predicted saving on bench/calibration/corpus-3.json and corpus-4.json (72 pairs
# from 20 jobs of the family, each arm two fresh jobs timed by their own clock): their 7th and
# 66th, which bound a new pair's with 80 % probability (split conformal, bench_calibration.fit).
# Reported on all of corpus.json, captured after this model's form was frozen
# (docs/findings.md). Wider below: a prefetch of numpy or sleeping Python slowed some steps by
# up to 20 % where the model predicts a few % saved.
SAVING_SPREAD = (-0.138, 0.074)

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
    wait_share = min(max(evidence.input_share, 0.0), 1.0)
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
                + " and stays serial on parallel calls."
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
        # The job's own cores and their use were read (the agent, the job's /proc): the case
        # SAVING_SPREAD was measured in. Elsewhere the range also spans no free core at all.
        self.cores_known = False
        self.prefetched = False
        self.python = False
        # The job's threads' own work a step beyond the model's one core for the step's compute
        # and p_now for the pipeline (TF ops on intra-op threads, TensorFlow's spinning pools),
        # in core-ms: the cores used times the step, less those. 0 where they were not read.
        self.extra_work = 0.0
        self.cores_available = cores
        # The share of the Python's time it computes, holding the GIL; None: unknown (`analyze`).
        self.gil: float | None = None
        # The agent's stacks saw the pipeline's Python let the GIL go at the user's own lines
        # (numpy, a sleep): it keeps a core busy, perhaps, but a parallel map spreads it.
        self.lets_gil_go = False
        # The cores the step's own compute keeps busy (TF ops on intra-op threads), from the
        # cores used less the pipeline's; 1 where they were not read.
        self.compute_cores = 1.0

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
        stacks = summary.python_stacks
        if (
            job.python
            and stacks is not None
            and stacks.source == "agent"  # py-spy reads frames without the GIL: unbiased
            and stacks.pipeline_samples >= GIL_JUDGED_SAMPLES
        ):
            job.lets_gil_go = stacks.pipeline_library_share < GIL_HELD_LIBRARY_SHARE
        cpu = summary.process_cpu
        job.cores_known = cpu is not None and cpu.source in ("agent", "proc")
        # The job's own cores used (a host's, read by a sidecar elsewhere, say nothing of it).
        used = cpu.cores_used if cpu is not None and cpu.source in ("agent", "proc") else None
        if used is not None:  # the cores the job keeps busy beyond its step's compute
            if not job.python:  # TF ops' own threads; Python's work is its one thread's
                job.extra_work = max(0.0, now * used - job.compute - job.wait * job.p_now)
            job.cores_available = _usable(cpu.cores_available)
            job.gil = min(1.0, max(0.0, (used - (1 - wait_share)) / max(wait_share, 1e-9)))
            pipeline = job.wait * job.p_now * job.busy_share
            job.compute_cores = min(
                job.cores_available, max(0.0, (now * used - pipeline) / max(job.compute, 1e-9))
            )
        return job

    @property
    def busy_share(self) -> float:
        """The share of the pipeline's time it keeps a core busy: all of it for TF ops (and
        unknown Python); for Python, the cores used say (a sleep or a read keeps none)."""
        return 1.0 if not self.python or self.gil is None else self.gil

    @property
    def computes(self) -> bool:
        """Its Python computes (keeps a core busy) rather than waits: it holds the GIL."""
        return self.python and self.gil is not None and self.gil >= PYTHON_COMPUTES_SHARE

    def predict(self, chosen: tuple[str, ...]) -> ActionSaving:
        saving = max(-1.0, 1 - self._step(chosen) / self.now)  # below 0: a slower step
        least = saving
        if not self.cores_known:  # its threads may hold every core already: none to gain
            least = min(saving, max(-1.0, 1 - self._step(chosen, self.p_now) / self.now))
        low, high = (
            min(1.0, max(-1.0, base + spread))
            for base, spread in zip((least, saving), SAVING_SPREAD, strict=True)
        )
        return ActionSaving(
            action="+".join(chosen),
            step_ms_after=round(self.now * (1 - saving), 3),
            saving_share=round(saving, 4),
            saving_range=(round(low, 4), round(high, 4)),
        )

    def _step(self, chosen: tuple[str, ...], cores: float | None = None) -> float:
        """The step after `chosen`, on `cores` (the job's free cores by default)."""
        cores = self.cores if cores is None else cores
        work = (self.wait + (self.compute if self.prefetched else 0.0)) * self.p_now
        python_work = work if self.python else 0.0
        tf_work = work - python_work
        compute = self.compute
        if "python" in chosen:
            tf_work += python_work * TF_OPS_COST_OF_PYTHON
            python_work = 0.0
            if self.computes:  # the step no longer waits for the GIL
                compute *= 1 - GIL_WAIT_SHARE
        parallel = "parallel_calls" in chosen
        width = cores if parallel else self.p_now
        # Stays serial, holding the GIL (Python that computes and never lets it go).
        held = python_work if self.computes and not self.lets_gil_go else 0.0
        batch = (tf_work + python_work - held) / width + held
        ahead = self.prefetched or "prefetch" in chosen
        if held and (ahead or parallel):
            # A GIL convoy: the Python runs beside the training loop, whose thread must win the
            # GIL back from it each time it returns from TensorFlow (a switch interval, 5 ms,
            # each); on one core the threads take turns with the time slice instead.
            contended = min(1.0, max(0.0, self.cores_available - 1))
            return compute + batch + GIL_CONVOY_SHARE * held * contended
        if not ahead:
            return compute + batch
        # Running ahead, the pipeline makes the next batch while the step computes, as fast as
        # the cores the compute leaves free let it (its waiting, a sleep or a read, needs none).
        busy = 1.0 if python_work == 0 else self.busy_share
        free = max(0.0, self.cores_available - self.compute_cores)
        overlap = min(batch, compute * ((1 - busy) + busy * min(1.0, free / width)))
        # And no step is shorter than the job's work (its threads' work the cores used showed
        # too) over the cores it may use.
        return max(
            compute + batch - overlap,
            (compute + tf_work + python_work) / cores,
            (compute + tf_work + python_work + self.extra_work) / self.cores_available,
        )


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
    return _usable(free), where


def _usable(cores: float) -> float:
    """The parallel calls `cores` allow a pipeline: at least 1, at most the most AUTOTUNE runs."""
    return max(1.0, min(cores, INPUT_MAX_PARALLELISM))
