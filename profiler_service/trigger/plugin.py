"""What a trigger brings to the service: how it is built from the service's parts, and, once
built, its metrics (`collect`) and, when it runs something of its own (the scheduler's loop),
its life (`start`/`stop`: a `lifecycle.Component`). `service.py` builds every trigger of its one
list (`TRIGGERS`), starts those with a life with the rest, and registers their metrics.

A new trigger is three files: its module (the trigger, its `PLUGIN`, its metrics; its outcomes
are `outcomes.Outcome`'s), its settings group (config/, named on the `Settings` root), and the
line that lists it in `service.TRIGGERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, cast

from profiler_service.models import TriggerKind

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from profiler_service.capture.controller import CaptureController
    from profiler_service.config import Settings
    from profiler_service.lifecycle import Lifecycle
    from profiler_service.lookback.sampler import Sampler
    from profiler_service.store import SnapshotStore

__all__ = ["BuiltTrigger", "TriggerParts", "TriggerPlugin", "Triggers"]


@dataclass(frozen=True)
class TriggerParts:
    """What a trigger may be built from."""

    settings: Settings
    controller: CaptureController
    store: SnapshotStore
    sampler: Sampler | None  # the look-back ring's, where it runs
    lifecycle: Lifecycle  # to close what the trigger opens (`closing`)


class BuiltTrigger(Protocol):
    """A trigger; one that runs something of its own is also a `Component` (start, stop)."""

    def collect(self) -> Iterator[Metric]:
        """Its counters, each outcome from 0 (prometheus_client's custom collector)."""
        ...


T = TypeVar("T", bound=BuiltTrigger)


@dataclass(frozen=True)
class TriggerPlugin(Generic[T]):
    kind: TriggerKind  # the captures it starts (`trigger.kind`): its name in the service
    build: Callable[[TriggerParts], T | None]  # None: off by its settings


class Triggers:
    """A service's built triggers, in the order built, each read by its plugin and typed as its
    plugin builds it: `service.triggers.get(alerts.PLUGIN)` is an `AlertTrigger | None`."""

    def __init__(self) -> None:
        self._built: dict[TriggerKind, BuiltTrigger] = {}

    def add(self, plugin: TriggerPlugin[T], built: T) -> None:
        self._built[plugin.kind] = built

    def get(self, plugin: TriggerPlugin[T]) -> T | None:
        return cast("T | None", self._built.get(plugin.kind))  # only add() wrote it: a T

    def all(self) -> list[BuiltTrigger]:
        return list(self._built.values())
