"""Whether two captures measured the same job doing the same work, before a step time is
compared: what differs between them, each in a sentence.

Some differences make two step times incomparable: another framework, other GPUs (or none), a
different number of cores or hosts. The verification then checks no prediction, and a gate says
what changed beside its verdict. One more is read from the steps themselves: a fix shortens one
part of the step (the input wait, the compute, the launches) and leaves the others, while a
smaller batch shortens every part alike. Where the step moved by more than `SCALED_STEP_SHARE`
and its input wait and its own compute each moved within `SCALED_PARTS_SPREAD` of it, the work
of a step changed, most likely the batch: TensorFlow's trace carries no batch size, so such a
job is compared by its throughput, which only it can count. Where the job's step markers say
how many examples a step takes (`training_step(i, examples=...)`), the batch is known: two
captures whose batches differ are then compared by time per example, a difference accounted
for (`verification_record.ACCOUNTED`), and the guess from the parts is not made.
"""

from __future__ import annotations

from collections import Counter

from profiler_service.analysis.models import Summary
from profiler_service.verification_record import Difference, DifferenceKind

__all__ = ["differences", "examples_changed"]

# A step that moved by more than this share (two captures of an unchanged job differ by a few
# percent: bench_verification)...
SCALED_STEP_SHARE = 0.15
# ...with its input wait and its own compute each within this share of the step's ratio.
SCALED_PARTS_SPREAD = 0.15
# Batches within this share of each other are one batch (a last partial batch in the median).
EXAMPLES_SAME_SHARE = 0.01


def examples_changed(base: Summary, head: Summary) -> tuple[float, float] | None:
    """The examples a step takes before and after, where both markers say and they differ."""
    told = (base.step_time.examples_per_step, head.step_time.examples_per_step)
    if not told[0] or not told[1] or abs(told[1] / told[0] - 1) <= EXAMPLES_SAME_SHARE:
        return None
    return told[0], told[1]


def differences(base: Summary | None, head: Summary | None) -> list[Difference]:
    """What differs between two captures' jobs and work (empty: like with like)."""
    if base is None or head is None:
        return []
    found: list[Difference] = []

    def say(kind: DifferenceKind, detail: str) -> None:
        found.append(Difference(kind=kind, detail=detail))

    if base.framework and head.framework and base.framework != head.framework:
        say(DifferenceKind.FRAMEWORK, f"framework {base.framework} -> {head.framework}")
    if (devices := (_gpus(base), _gpus(head)))[0] != devices[1]:
        say(DifferenceKind.DEVICES, f"GPUs {_describe(devices[0])} -> {_describe(devices[1])}")
    cores = [s.process_cpu.cores_available if s.process_cpu else None for s in (base, head)]
    if cores[0] is not None and cores[1] is not None and abs(cores[0] - cores[1]) >= 0.5:
        say(DifferenceKind.CORES, f"cores {cores[0]:g} -> {cores[1]:g}")
    if base.hosts and head.hosts and len(base.hosts) != len(head.hosts):
        say(DifferenceKind.HOSTS, f"hosts {len(base.hosts)} -> {len(head.hosts)}")
    batch_known = bool(base.step_time.examples_per_step and head.step_time.examples_per_step)
    if (examples := examples_changed(base, head)) is not None:
        say(
            DifferenceKind.EXAMPLES,
            f"examples a step {examples[0]:g} -> {examples[1]:g}: compared by time per example",
        )
    elif not batch_known and (scaled := _scaled(base, head)) is not None:
        say(
            DifferenceKind.SCALED,
            f"every part of the step moved alike ({scaled - 1:+.0%}): the work of a step "
            "changed, most likely the batch; compare examples per second, not step times",
        )
    return found


def _gpus(summary: Summary) -> Counter[str]:
    if summary.gpu is None:
        return Counter()
    return Counter(d.model or d.vendor for d in summary.gpu.devices)


def _describe(gpus: Counter[str]) -> str:
    return ", ".join(f"{n} x {model}" for model, n in sorted(gpus.items())) or "none"


def _scaled(base: Summary, head: Summary) -> float | None:
    """The step's ratio where its input wait and its own compute moved alike with it."""
    before, after = base.step_time, head.step_time
    if not before.avg_ms or not after.avg_ms:
        return None
    ratio = after.avg_ms / before.avg_ms
    if abs(ratio - 1) <= SCALED_STEP_SHARE:
        return None
    wait = (before.breakdown_avg.input_ms, after.breakdown_avg.input_ms)
    compute = (before.avg_ms - wait[0], after.avg_ms - wait[1])
    for part in (wait, compute):
        if part[0] <= 0 or abs(part[1] / part[0] / ratio - 1) > SCALED_PARTS_SPREAD:
            return None
    return ratio
