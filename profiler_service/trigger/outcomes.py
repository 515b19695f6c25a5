"""What a trigger's request for a capture came to: one vocabulary for every trigger (webhook
alerts, schedules, the memory watch, the fleet hub's routing), each value with its meaning, as
`SnapshotErrorCode` has. The metrics' `outcome` labels and the alert log use these values;
docs/reference/errors-and-outcomes.md is generated from each member's `description`.
"""

from __future__ import annotations

from profiler_service.described import Described

__all__ = ["START_OUTCOMES", "Outcome"]


class Outcome(Described):
    CAPTURED = ("captured", "A capture started; an alert's `snapshot_id` names it.")
    DEDUPLICATED = (
        "deduplicated",
        "Alerts: the same alert (fingerprint) was captured within `webhook_cooldown_s` "
        "(`reason`: `cooldown`); `snapshot_id` names that capture.",
    )
    SKIPPED_BUSY = (
        "skipped_busy",
        "The target is being captured (an alert's `reason`: `capture_in_progress`); a schedule "
        "tries again at its next interval, the memory watch at its next reading past the "
        "cooldown.",
    )
    THROTTLED = (
        "throttled",
        "Alerts: another alert started a capture within `webhook_min_interval_s` (`reason`: "
        "`min_interval`).",
    )
    REJECTED = (
        "rejected",
        "Not captured, and asking again would not help: an alert's `reason` is "
        "`no_matching_target` (the detail lists the labels tried, the targets and the rules), "
        "`invalid_duration`, `unknown_status`, or an API error code; a schedule or the memory "
        "watch names the error in its log (an unknown target, a duration out of bounds).",
    )
    RESOLVED = ("resolved", "Alerts: a resolved alert, recorded, never captured.")
    # The fleet hub's own (hub/routing.py): no registered sidecar captures what the alert names,
    # or the one that does did not answer.
    NO_SIDECAR = (
        "no_sidecar",
        "The fleet hub's: no registered sidecar captures what the alert names (`reason`: "
        "`no_matching_sidecar`), or several do (`ambiguous_target`, the detail names them); "
        "nothing was dialled.",
    )
    SIDECAR_UNREACHABLE = (
        "sidecar_unreachable",
        "The fleet hub's: the sidecar that captures the alert's target did not answer, or "
        "answered an error (`reason`: `no_answer`); no other sidecar is tried.",
    )

    @classmethod
    def of_start(cls, start: str) -> Outcome:
        """What the controller's answer to `try_start` (capture/controller.py's StartOutcome:
        started, busy, rejected) comes to for a trigger."""
        return {"started": cls.CAPTURED, "busy": cls.SKIPPED_BUSY}.get(start, cls.REJECTED)


# What a trigger that asks the controller itself (a schedule, the memory watch) can come to: its
# counters' outcome labels, each exported from 0.
START_OUTCOMES = (Outcome.CAPTURED, Outcome.SKIPPED_BUSY, Outcome.REJECTED)
