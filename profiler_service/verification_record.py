"""What a snapshot records of its check against the job's last one (`Snapshot.verification`,
`Snapshot.step_change`): each finding's status and its prediction checked, the job's step change
with its interval, and what differs between the two captures.

The snapshot model (models.py), the store's listing and the comparisons (across/, which compute
them: verification.py, comparability.py) all read these, so they live in a module of their own
below all three.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

__all__ = [
    "ACCOUNTED",
    "Difference",
    "DifferenceKind",
    "FixStatus",
    "PredictionCheck",
    "StepChange",
    "Verification",
]


class DifferenceKind(StrEnum):
    FRAMEWORK = "framework"
    DEVICES = "devices"
    CORES = "cores"
    HOSTS = "hosts"
    SCALED = "scaled"  # every part of the step moved alike: its work changed (the batch)
    EXAMPLES = "examples"  # the markers say the batch changed: compared by time per example


# Differences the comparison allows for: the step change is then measured like with like.
ACCOUNTED = frozenset({DifferenceKind.EXAMPLES})


class Difference(BaseModel):
    kind: DifferenceKind
    detail: str

    @property
    def accounted(self) -> bool:
        return self.kind in ACCOUNTED


class FixStatus(StrEnum):
    RESOLVED = "resolved"
    PERSISTS = "persists"
    REGRESSED = "regressed"
    NEW = "new"


class PredictionCheck(StrEnum):
    """Where the measured saving fell against the earlier finding's predicted range."""

    WITHIN = "within"
    BELOW = "below"  # saved less than the least predicted
    ABOVE = "above"  # saved more than the most predicted


class StepChange(BaseModel):
    """The job's step time between two captures: `change_share` = after / before - 1."""

    step_ms_before: float | None = None
    step_ms_after: float | None = None
    change_share: float | None = None
    change_interval_95: tuple[float, float] | None = None  # None: too few steps, see `note`
    # What two captures of the unchanged job differ by (log sd of a capture's mean step), in
    # the interval, and where it was read (across/capture_noise.py); None: the steps' own
    # noise only.
    between_captures_sd: float | None = None
    between_captures_source: str | None = None
    # What differs between the two captures' jobs and work (across/comparability.py): where
    # anything the comparison does not account for does, no prediction is checked against this
    # change.
    differences: list[Difference] = Field(default_factory=list)
    # The examples a step took before and after, where the batch changed (the markers say):
    # `change_share` and its interval are then of the time per example.
    examples_per_step: tuple[float, float] | None = None
    note: str | None = None

    @property
    def like_with_like(self) -> bool:
        """Nothing differs that the comparison does not account for."""
        return all(d.accounted for d in self.differences)

    @property
    def slower(self) -> bool:
        """Slower beyond the noise: the whole interval above 0."""
        return self.change_interval_95 is not None and self.change_interval_95[0] > 0

    @property
    def faster(self) -> bool:
        return self.change_interval_95 is not None and self.change_interval_95[1] < 0


class Verification(BaseModel):
    rule: str
    status: FixStatus
    step_ms_before: float | None = None
    step_ms_after: float | None = None
    change_share: float | None = None
    change_interval_95: tuple[float, float] | None = None
    predicted_saving_share: float | None = None  # the earlier finding's impact
    predicted_saving_range: tuple[float, float] | None = None
    # 1 - after / before, for a finding the earlier snapshot raised: what its fix (or whatever
    # changed) saved, beside what was predicted
    measured_saving_share: float | None = None
    # None: nothing predicted or measured, or the step's change not this finding's (see above)
    prediction: PredictionCheck | None = None
    # The changes of the recommendation the later capture shows made (`python+prefetch`): the
    # prediction is theirs, not the whole recommendation's. None: one change, or not seen.
    action: str | None = None
