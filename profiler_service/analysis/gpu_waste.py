"""What one capture says about its job's idle GPU time: why the GPUs idled, and what fixing the
job would give back. The fleet ledger (hub/ledger.py) spreads these shares over the GPU-hours
Prometheus counted; the index keeps them as a column so the ledger reads no snapshot.json.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from profiler_service.analysis.models import Finding, HostActivity, Impact, Summary
from profiler_service.described import Described

__all__ = ["CaptureWaste", "IdleCause", "capture_waste"]


class IdleCause(Described):
    """Why a GPU-hour was idle, as the ledger names it, each with what it means."""

    INPUT = (
        "input",
        "The host waited on tf.data (the step's get-next, or tf.data's own threads preparing "
        "later elements).",
    )
    PYTHON = ("python", "Python ran, or ops were dispatched eagerly one by one.")
    LAUNCHES = (
        "launches",
        "TF ops ran on the host and launched kernels: the GPU waited on launches.",
    )
    COPIES = ("copies", "The host copied data to or from the GPU.")
    NOTHING_TRACED = (
        "nothing_traced",
        "The host's traced events show nothing: untraced Python, I/O, or waiting (checkpoints, "
        "evaluation, a slow worker).",
    )
    NO_CAPTURE = (
        "no_capture",
        "No capture of the job lies within `hub_ledger_capture_horizon_s` of these hours (or "
        "none of its captures traced a GPU): nothing explains them.",
    )


# The host lanes of gpu_activity.py, as the ledger's causes (tf.data's background threads are
# the input pipeline too).
_CAUSE_OF = {
    HostActivity.INPUT: IdleCause.INPUT,
    HostActivity.TF_DATA: IdleCause.INPUT,
    HostActivity.PYTHON: IdleCause.PYTHON,
    HostActivity.TF_OPS: IdleCause.LAUNCHES,
    HostActivity.TRANSFER: IdleCause.COPIES,
    HostActivity.NOTHING: IdleCause.NOTHING_TRACED,
}


class CaptureWaste(BaseModel):
    """One capture's GPUs, averaged over the ones that ran kernels."""

    gpus: int  # that ran a kernel
    model: str | None = None
    idle_share: float  # of the capture's window
    # Shares of the idle time by cause (IdleCause values but no_capture); they sum to 1.
    idle_by_cause: dict[str, float] = Field(default_factory=dict)
    # The finding whose fix gives back the most GPU-hours: a shorter step, or GPUs that ran
    # nothing returned (`Impact.gpu_hours_share`). Findings overlap (a host-bound GPU is an idle
    # one), so they are never added up.
    saving_share: float = 0.0
    # Its least and most (a count of GPUs returned is exact); rows written before 0.2.0 have
    # none: their point, both ends.
    saving_range: tuple[float, float] | None = None
    rule: str | None = None
    severity: str | None = None
    title: str | None = None

    @property
    def saving_bounds(self) -> tuple[float, float]:
        return self.saving_range or (self.saving_share, self.saving_share)

    def idle_split(self) -> dict[str, float]:
        """The idle time's shares by cause, summing to exactly 1 (the stored ones are rounded)."""
        whole = sum(self.idle_by_cause.values())
        return {cause: share / whole for cause, share in self.idle_by_cause.items()}


def capture_waste(summary: Summary | None, findings: Sequence[Finding]) -> CaptureWaste | None:
    """None when the capture ran no kernel on a GPU: it cannot say why a GPU idled."""
    gpu = summary.gpu if summary else None
    if gpu is None or gpu.idle_share is None:  # no GPU ran a kernel
        return None
    active = gpu.active
    by_cause: dict[str, float] = {}
    for activity, cause in _CAUSE_OF.items():
        by_cause[cause.value] = by_cause.get(cause.value, 0.0) + gpu.idle_while(activity)
    total = sum(by_cause.values())
    shares = (
        {c: round(v / total, 4) for c, v in sorted(by_cause.items()) if v > 0}
        if total > 0
        else {IdleCause.NOTHING_TRACED.value: 1.0}
    )
    top = max(
        (f for f in findings if f.impact and f.impact.gpu_hours_share > 0),
        key=lambda f: f.impact.gpu_hours_share,  # type: ignore[union-attr]
        default=None,
    )
    models = {d.model for d in active if d.model}
    return CaptureWaste(
        gpus=len(active),
        model=models.pop() if len(models) == 1 else None,
        idle_share=round(gpu.idle_share, 4),
        idle_by_cause=shares,
        saving_share=round(min(top.impact.gpu_hours_share, 1.0), 4) if top and top.impact else 0.0,
        saving_range=_bounds(top.impact) if top and top.impact else (0.0, 0.0),
        rule=top.rule if top else None,
        severity=top.severity.value if top else None,
        title=top.title if top else None,
    )


def _bounds(impact: Impact) -> tuple[float, float]:
    """The least and most share of GPU-hours the fix gives back."""
    if impact.saving_share <= 0 < impact.returned_gpu_share:
        return (impact.returned_gpu_share, impact.returned_gpu_share)
    low, high = impact.saving_range
    return (round(min(low, 1.0), 4), round(min(high, 1.0), 4))
