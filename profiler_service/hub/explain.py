"""The hub closes the ledger's loop: it asks for the captures that explain idle GPU-hours.

The ledger (ledger.py) gives a job's idle hours the causes of its nearest capture; hours farther
than `hub_ledger_capture_horizon_s` from every capture are `no_capture`, and on a fleet whose
jobs are never captured that is all of them. Each round (every `hub_ledger_refresh_s`) the hub
reads the ledger over the last horizon and goes through its jobs, the most `no_capture`
GPU-hours first:

    asked within the horizon, answered captured, deduplicated or rejected -> not asked again
    no live sidecar profiles it (of its namespace, its workload or pods)  -> listed: no sidecar
    `hub_explain_captures_per_h` captures started within the last hour    -> listed: waiting
    otherwise, with `hub_explain_idle`                                    -> its sidecar is asked

An ask is one alert (`IdleGpuHoursUnexplained`, labelled with the job's pod, namespace,
workload and target) posted to the sidecar's Alertmanager webhook, the path the hub's routed
alerts take (routing.py): the sidecar applies its own bounds (the alert's cooldown, the minimum
interval between alert captures, one capture at a time) and answers. `skipped_busy`,
`throttled` and a sidecar that does not answer are asked again at a later round; only
`captured` spends the budget. The capture, mirrored to the bucket and indexed, explains the
job's hours up to a horizon on either side of it.

One replica asks for the fleet (the index's `explain` lease, on PostgreSQL); what was asked is
kept in the index's state, so every replica's page shows it and a restarted hub asks no job
twice in a horizon. On SQLite every replica keeps its own index, so each asks within its own
budget. Off (the default), the rounds still run: the page says which jobs would be asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import httpx
from pydantic import BaseModel, Field

from profiler_service.analysis.gpu_waste import IdleCause
from profiler_service.config import ExplainSettings, LedgerSettings
from profiler_service.durations import format_window
from profiler_service.errors import Failed
from profiler_service.hub.ledger import JobLedger, Ledger, job_of_pod
from profiler_service.hub.ledger_book import LedgerBook
from profiler_service.hub.registry import SidecarRegistry
from profiler_service.hub.routing import FleetRouter, read_answer, unanswered, webhook_url
from profiler_service.lifecycle import BackgroundLoop, LoopOwner
from profiler_service.sidecar_record import SidecarRecord
from profiler_service.tenancy import Reach
from profiler_service.trigger.alert_log import Reason
from profiler_service.trigger.outcomes import Outcome
from profiler_service.trigger.webhook_payload import alert_fingerprint

__all__ = ["ALERT_NAME", "ASK_OUTCOMES", "ExplainPolicy", "ExplainState", "JobAsk", "plan"]

log = logging.getLogger(__name__)

ALERT_NAME = "IdleGpuHoursUnexplained"
STATE_KEY = "explain"  # its row in the index's sync state, and its lease
HOUR_S = 3600.0
LISTED = 200  # jobs kept in each list of the state (a fleet of thousands: the most first)
MIN_GPU_HOURS = 0.01  # less unexplained than this is not worth a capture
# What ends a job's asks for the horizon: it was captured (just now, or within the sidecar's
# cooldown), or asking again would not help (no target of the sidecar matches, a duration out
# of its bounds).
FINAL = frozenset({Outcome.CAPTURED, Outcome.DEDUPLICATED, Outcome.REJECTED})
# The answers an ask can get: the sidecar's, or none (`profiler_fleet_explain_asks_total`).
ASK_OUTCOMES = (
    Outcome.CAPTURED, Outcome.DEDUPLICATED, Outcome.THROTTLED, Outcome.SKIPPED_BUSY,
    Outcome.REJECTED, Outcome.SIDECAR_UNREACHABLE,
)  # fmt: skip


class JobAsk(BaseModel):
    """A job of the ledger as the policy sees it: its unexplained hours and, once asked, what
    its sidecar answered."""

    namespace: str | None = None
    job: str
    no_capture_gpu_hours: float  # over the last horizon, when it was listed or asked
    sidecar: str | None = None  # namespace/name
    target: str | None = None
    at: float | None = None  # unix seconds of the ask
    outcome: str | None = None  # the sidecar's (an Outcome), or sidecar_unreachable
    reason: str | None = None
    detail: str | None = None
    snapshot_id: str | None = None
    # Its no_capture GPU-hours in the latest round's ledger: 0 once a capture explains them.
    no_capture_gpu_hours_now: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace or ''}/{self.job}"

    @property
    def asked_at(self) -> str:
        """When it was asked, for people."""
        if self.at is None:
            return ""
        return datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class ExplainState(BaseModel):
    """What the policy did, as `GET /fleet/explain` and the fleet page show it."""

    enabled: bool
    captures_per_h: int
    horizon: str  # the ledger's capture horizon, the window the jobs are ranked over
    updated_at: float | None = None  # unix seconds of the last round
    rounds: int = 0
    captures_last_hour: int = 0
    asked: list[JobAsk] = Field(default_factory=list)  # each job's last ask in the horizon
    waiting: list[JobAsk] = Field(default_factory=list)  # a live sidecar, not asked this round
    no_sidecar: list[JobAsk] = Field(default_factory=list)  # no live sidecar profiles them
    notes: list[str] = Field(default_factory=list)

    def within(self, reach: Reach) -> ExplainState:
        """The jobs of the namespaces `reach` allows."""
        if reach.everywhere:
            return self
        keep = lambda jobs: reach.keep(jobs, lambda j: j.namespace)  # noqa: E731
        return self.model_copy(
            update={
                "asked": keep(self.asked),
                "waiting": keep(self.waiting),
                "no_sidecar": keep(self.no_sidecar),
            }
        )


@dataclass
class Plan:
    """One round's decisions, most unexplained first."""

    ask: list[tuple[JobAsk, SidecarRecord]] = field(default_factory=list)
    waiting: list[JobAsk] = field(default_factory=list)
    no_sidecar: list[JobAsk] = field(default_factory=list)
    budget_left: int = 0


def unexplained(job: JobLedger) -> float:
    return job.idle_by_cause.get(IdleCause.NO_CAPTURE, 0.0)


def captures_within_hour(asks: Iterable[JobAsk], now: float) -> int:
    """The captures asks started within the hour before `now`: the budget they spent."""
    return sum(1 for a in asks if a.outcome == Outcome.CAPTURED and (a.at or 0) > now - HOUR_S)


def sidecar_of(job: JobLedger, sidecars: Iterable[SidecarRecord]) -> SidecarRecord | None:
    """The live sidecar that profiles `job`: of its namespace, naming its workload, or beside
    one of the pods Prometheus counted for it (or a pod of the same name less its suffix)."""
    pods = set(job.pods)
    mine = [
        s
        for s in sidecars
        if s.namespace == job.namespace
        and s.targets
        and (
            s.workload == job.job
            or (s.pod or s.name) in pods
            or (s.workload is None and job_of_pod(s.pod or s.name) == job.job)
        )
    ]
    return min(mine, key=lambda s: ((s.pod or s.name) not in pods, s.key), default=None)


def plan(
    ledger: Ledger,
    sidecars: list[SidecarRecord],
    asked: dict[str, JobAsk],
    *,
    now: float,
    captures_per_h: int,
) -> Plan:
    """Which jobs to ask, and why the others are not; `asked`: each job's last ask within the
    horizon."""
    spent = captures_within_hour(asked.values(), now)
    out = Plan(budget_left=max(0, captures_per_h - spent))
    left = out.budget_left
    taken: set[str] = set()  # one ask per sidecar a round
    jobs = sorted(ledger.jobs, key=lambda j: (-unexplained(j), j.namespace or "", j.job))
    for job in jobs:
        hours = unexplained(job)
        if hours < MIN_GPU_HOURS:
            break
        entry = JobAsk(namespace=job.namespace, job=job.job, no_capture_gpu_hours=hours)
        last = asked.get(entry.key)
        if last is not None and last.outcome in FINAL:
            continue  # once per horizon
        sidecar = sidecar_of(job, sidecars)
        if sidecar is None:
            out.no_sidecar.append(
                entry.model_copy(update={"detail": "no live sidecar profiles this job"})
            )
        elif left > 0 and sidecar.key not in taken:
            out.ask.append((entry, sidecar))
            taken.add(sidecar.key)
            left -= 1
        else:
            why = (
                f"beyond this hour's budget ({captures_per_h} captures, "
                f"{captures_per_h - out.budget_left} started)"
                if left == 0
                else "its sidecar is asked for another job this round"
            )
            if last is not None:  # asked before: busy, throttled or unreachable
                why = f"{why}; last answer {last.outcome} ({last.detail})"
            out.waiting.append(entry.model_copy(update={"sidecar": sidecar.key, "detail": why}))
    return out


class StateStore(Protocol):
    """The index's small key-value state (index/writes.py `IndexWrites`)."""

    def state(self) -> dict[str, str]: ...

    def set_state(self, **values: str) -> None: ...


class ExplainPolicy(LoopOwner):
    """One `BackgroundLoop`; `once()` is one round (the tests call it directly)."""

    def __init__(
        self,
        settings: ExplainSettings,
        ledger_settings: LedgerSettings,
        book: LedgerBook,
        registry: SidecarRegistry,
        router: FleetRouter,
        store: StateStore,
        lease: Callable[[str], AbstractContextManager[bool]],
        *,
        first_round_after_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ):
        """`lease`: the index's (one replica asks for the fleet); `first_round_after_s`: time
        for the sidecars to register again with a hub that just started."""
        self.settings, self.ledger_settings = settings, ledger_settings
        self.book, self.registry, self.router = book, registry, router
        self.store, self.lease, self.clock = store, lease, clock
        self.horizon_s = ledger_settings.ledger_capture_horizon_s
        self.window_s = max(self.horizon_s, ledger_settings.ledger_bucket_s)
        self.asks_total: dict[str, int] = dict.fromkeys(ASK_OUTCOMES, 0)
        self._counts_lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._loop = BackgroundLoop("fleet-explain", self._round, wait_first=first_round_after_s)

    def _round(self) -> float:
        self.once()
        return self.ledger_settings.ledger_refresh_s

    def stop(self, timeout_s: float | None = None) -> None:
        self._loop.stop(timeout_s)
        if self._client is not None:
            self._client.close()
            self._client = None

    def state(self) -> ExplainState:
        """The last round's state, whichever replica ran it."""
        text = self.store.state().get(STATE_KEY)
        if text:
            try:
                state = ExplainState.model_validate_json(text)
                return state.model_copy(
                    update={
                        "enabled": self.settings.enabled,
                        "captures_per_h": self.settings.captures_per_h,
                    }
                )
            except ValueError:
                log.warning("the explain policy's stored state is unreadable: starting afresh")
        return ExplainState(
            enabled=self.settings.enabled,
            captures_per_h=self.settings.captures_per_h,
            horizon=format_window(self.horizon_s),
        )

    def once(self) -> ExplainState | None:
        """One round: rank, ask (when on), keep the state. None when another replica holds the
        lease."""
        with self.lease(STATE_KEY) as held:
            if not held:
                return None
            return self._round_held()

    def _round_held(self) -> ExplainState:
        now = self.clock()
        before = self.state()
        asked = {a.key: a for a in before.asked if a.at is not None and a.at > now - self.horizon_s}
        ledger = self.book.ledger(self.window_s)
        state = ExplainState(
            enabled=self.settings.enabled,
            captures_per_h=self.settings.captures_per_h,
            horizon=format_window(self.horizon_s),
            updated_at=now,
            rounds=before.rounds + 1,
        )
        if ledger.source != "prometheus":
            state.notes.append(
                "No idle hour is unexplained without GPU-hours: set hub_prometheus_url "
                f"(the ledger says: {'; '.join(ledger.notes) or ledger.source})."
            )
            decided = Plan()
        else:
            decided = plan(
                ledger,
                self.registry.live(),
                asked,
                now=now,
                captures_per_h=self.settings.captures_per_h,
            )
        for entry, sidecar in decided.ask:
            if not self.settings.enabled:
                state.waiting.append(
                    entry.model_copy(
                        update={"sidecar": sidecar.key, "detail": "would be asked (off)"}
                    )
                )
                continue
            answer = self._ask(entry, sidecar, now)
            asked[answer.key] = answer
            with self._counts_lock:
                self.asks_total[answer.outcome or ""] = (
                    self.asks_total.get(answer.outcome or "", 0) + 1
                )
            log.info("asked %s for a capture of %s (%.1f no_capture GPU-hours): %s %s",
                     sidecar.key, answer.key, entry.no_capture_gpu_hours, answer.outcome,
                     answer.snapshot_id or answer.detail)  # fmt: skip
            if answer.outcome not in FINAL:
                state.waiting.append(answer)
        now_hours = {f"{j.namespace or ''}/{j.job}": unexplained(j) for j in ledger.jobs}
        state.asked = sorted(
            (
                a.model_copy(update={"no_capture_gpu_hours_now": now_hours.get(a.key)})
                for a in asked.values()
            ),
            key=lambda a: -(a.at or 0),
        )[:LISTED]
        state.waiting = (state.waiting + decided.waiting)[:LISTED]
        state.no_sidecar = decided.no_sidecar[:LISTED]
        state.captures_last_hour = captures_within_hour(asked.values(), now)
        self.store.set_state(**{STATE_KEY: state.model_dump_json()})
        return state

    def _ask(self, entry: JobAsk, sidecar: SidecarRecord, now: float) -> JobAsk:
        """One alert to the sidecar's webhook; its answer, or why there is none."""
        found = self.router.match(
            {k: v for k, v in (("namespace", sidecar.namespace), ("pod", sidecar.pod)) if v},
            [sidecar],
        )
        target = found.target or (sidecar.targets or [None])[0]
        labels = {
            "alertname": ALERT_NAME,
            "namespace": sidecar.namespace,
            "pod": sidecar.pod or sidecar.name,
            "workload": entry.job,
            "profile_target": target,
            "severity": "info",
        }
        labels = {k: v for k, v in labels.items() if v}
        annotations = {
            "summary": f"{entry.no_capture_gpu_hours:.1f} idle GPU-hours of {entry.key} over the "
            f"last {format_window(self.horizon_s)} have no capture within "
            f"{format_window(self.horizon_s)} of them: the fleet hub asks for one to explain "
            "them (hub_explain_idle)",
        }
        if self.settings.duration_s is not None:
            annotations["profile_duration"] = f"{self.settings.duration_s:g}s"
        alert = {
            "status": "firing",
            "labels": labels,
            "annotations": annotations,
            "startsAt": datetime.fromtimestamp(now, UTC).isoformat(),
            "fingerprint": alert_fingerprint(labels),
        }
        body = {
            "version": "4",
            "receiver": "profiler-hub-explain",
            "status": "firing",
            "groupLabels": {"alertname": ALERT_NAME},
            "commonLabels": labels,
            "commonAnnotations": annotations,
            "alerts": [alert],
        }
        asked = entry.model_copy(update={"sidecar": sidecar.key, "target": target, "at": now})
        try:
            response = self.client.post(
                webhook_url(sidecar, "alertmanager"), json=body, headers=self.router.auth_headers()
            )
        except httpx.HTTPError as exc:
            answer: list | Failed = unanswered(sidecar, exc)
        else:
            answer = read_answer(sidecar, response, 1)
        if isinstance(answer, Failed):
            return asked.model_copy(
                update={
                    "outcome": Outcome.SIDECAR_UNREACHABLE,
                    "reason": Reason.NO_ANSWER,
                    "detail": answer.reason,
                }
            )
        theirs = answer[0]
        return asked.model_copy(
            update={
                "outcome": theirs.outcome,
                "reason": theirs.reason,
                "detail": theirs.detail,
                "snapshot_id": theirs.snapshot_id,
                "target": theirs.target or target,
            }
        )

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(timeout=self.router.fleet.forward_timeout_s)
        return self._client

    def counts(self) -> dict[str, int]:
        """Asks by outcome since this replica started (`profiler_fleet_explain_asks_total`)."""
        with self._counts_lock:
            return dict(self.asks_total)
