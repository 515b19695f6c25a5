"""docs/reference/errors-and-outcomes.md: statuses, failure codes, API errors, alert outcomes.

Each table comes from where the codes are defined, each member carrying its meaning
(`Described`, described.py): `SnapshotStatus` and `TriggerKind` (models.py), `SnapshotErrorCode`
and `ServiceError`'s subclasses (errors.py, and the hub's in hub/routing.py), the API's own
handlers (api/errors.py), the trigger outcomes (trigger/outcomes.py) and the alerts' reasons
(trigger/alert_log.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect

from profiler_service.api.errors import HANDLER_ERRORS
from profiler_service.described import Described
from profiler_service.docs_reference.markdown import code, table
from profiler_service.errors import ServiceError, SnapshotErrorCode
from profiler_service.models import SnapshotStatus, TriggerKind
from profiler_service.trigger.alert_log import Reason
from profiler_service.trigger.outcomes import Outcome

INTRO = """# Errors and outcomes

The codes clients and alerts can match on. What the service does around each fault (and what
it was tested against) is in [Operations](../operations.md).

"""


def render() -> str:
    return "\n".join(
        [
            INTRO.rstrip("\n") + "\n",
            "## Snapshot status\n",
            "A snapshot's `status` goes `capturing → analyzing → ready`, or ends `failed` "
            "(with `error`) or `interrupted`.\n",
            table(["status", "meaning"], _meanings(SnapshotStatus)),
            "## Failure codes\n",
            "A failed snapshot's `error.code`; `error.detail` is a sentence naming the address, "
            "path or limit involved. `profiler_capture_errors_total{error}` counts them.\n",
            table(["code", "meaning"], _meanings(SnapshotErrorCode)),
            "## HTTP errors\n",
            'Every error answer is JSON `{"error": CODE, "detail": SENTENCE}` (some add fields, '
            "such as `checks` on `/readyz`).\n",
            table(["error", "HTTP status", "meaning"], _http_errors()),
            "## Trigger outcomes\n",
            "What a trigger's request for a capture came to, one vocabulary for every trigger "
            "(trigger/outcomes.py). Each alert of a Grafana or Alertmanager payload gets one, "
            "answered at once (202), kept in `GET /webhooks/alerts` and "
            "`STORE/webhooks/alerts.jsonl`, and counted in "
            "`profiler_webhook_alerts_total{source,outcome}` (whose `truncated` counts alerts a "
            "sender left out of its payload); a schedule's in "
            "`profiler_schedule_captures_total{target,outcome}` and the memory watch's in "
            "`profiler_memory_watch_captures_total{reason,outcome}` (those two: `captured`, "
            "`skipped_busy`, `rejected`).\n",
            table(["outcome", "meaning"], _meanings(Outcome)),
            "An alert not captured says why in its `reason` beside the outcome: one of these, "
            "or, where the controller refused the capture, the API's error code "
            "([HTTP errors](#http-errors)).\n",
            table(["reason", "meaning"], _meanings(Reason)),
            "## Trigger kinds\n",
            "What started a capture: a snapshot's `trigger.kind`, the `trigger` label of "
            "`profiler_captures_total`.\n",
            table(["trigger", "meaning"], _meanings(TriggerKind)),
        ]
    )


def _meanings(enum: type[Described]) -> list[tuple[str, str]]:
    """Each member's value and what it means (a `Described` member cannot lack it)."""
    return [(code(m.value), m.description) for m in enum]


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _http_errors() -> list[tuple[str, str, str]]:
    # The hub's own codes are ServiceErrors too: imported here, so the page does not depend on
    # whether something else imported the hub first.
    if importlib.util.find_spec("profiler_service.hub") is not None:
        importlib.import_module("profiler_service.hub.routing")
    rows = {}
    for cls in _subclasses(ServiceError):
        doc = inspect.getdoc(cls)
        if not doc or doc == inspect.getdoc(ServiceError):
            raise ValueError(
                f"{cls.__module__}.{cls.__name__} has no docstring saying what it means"
            )
        rows.setdefault(cls.code, (code(cls.code), str(cls.status_code), doc))
    for name, (status, meaning) in HANDLER_ERRORS.items():
        rows.setdefault(name, (code(name), str(status) if status else "its own", meaning))
    return sorted(rows.values(), key=lambda r: (r[1], r[0]))
