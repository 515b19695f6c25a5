"""What a trigger brings to the service: how it is built from the service's parts, and, once
built, its metrics (`collect`) and, when it runs something of its own (the scheduler's loop),
its life (`start`/`stop`: a `lifecycle.Component`). `service.py` builds every trigger
`plugins()` finds, starts those with a life with the rest, and registers their metrics.

A trigger is registered by its kind: `plugins()` imports every module of `trigger/` and takes
each one's `PLUGIN`, in `TriggerKind`'s order, one plugin a kind. A plugin names the settings
group it reads (`TriggerPlugin(kind, ScheduleSettings, build)`): its parts hold that group, found
on the `Settings` root by its class, not the root. A new trigger is its module
(the trigger, its `PLUGIN`, its metrics; its outcomes are `outcomes.Outcome`'s), its test, and
its `TriggerKind` member (models.py: the value its snapshots carry and what it means); a
trigger with settings of its own adds its group in config/ too. tests/trigger/test_plugins.py
checks that every kind but the API's and the CLI's has its plugin.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from profiler_service.models import TriggerKind

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from profiler_service.capture.controller import CaptureController
    from profiler_service.config import Group, Settings
    from profiler_service.lifecycle import Lifecycle
    from profiler_service.lookback.sampler import Sampler
    from profiler_service.store import SnapshotStore

__all__ = [
    "NOT_PLUGINS",
    "BuiltTrigger",
    "TriggerParts",
    "TriggerPlugin",
    "Triggers",
    "group_of",
    "plugins",
]

# The kinds no plugin starts: the API's route and the CLI's command start their captures
# themselves.
NOT_PLUGINS = frozenset({TriggerKind.API, TriggerKind.CLI})


S = TypeVar("S", bound="Group")


@dataclass(frozen=True)
class TriggerParts(Generic[S]):
    """What a trigger may be built from: its own settings group, not the root's others."""

    settings: S
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
class TriggerPlugin(Generic[T, S]):
    kind: TriggerKind  # the captures it starts (`trigger.kind`): its name in the service
    settings: type[S]  # the group it reads, found on the `Settings` root by its class
    build: Callable[[TriggerParts[S]], T | None]  # None: off by its settings


class Triggers:
    """A service's built triggers, in the order built, each read by its plugin and typed as its
    plugin builds it: `service.triggers.get(alerts.PLUGIN)` is an `AlertTrigger | None`."""

    def __init__(self) -> None:
        self._built: dict[TriggerKind, BuiltTrigger] = {}

    def add(self, plugin: TriggerPlugin[T, Any], built: T) -> None:
        self._built[plugin.kind] = built

    def get(self, plugin: TriggerPlugin[T, Any]) -> T | None:
        return cast("T | None", self._built.get(plugin.kind))  # only add() wrote it: a T

    def all(self) -> list[BuiltTrigger]:
        return list(self._built.values())


def group_of(settings: Settings, group: type[S]) -> S:
    """The root's one group of class `group` (`ScheduleSettings` -> `settings.schedule`)."""
    names = [name for name, cls in type(settings).groups().items() if cls is group]
    if len(names) != 1:
        raise TypeError(f"{type(settings).__name__} has {len(names)} {group.__name__} groups")
    return cast("S", getattr(settings, names[0]))


def plugins() -> tuple[TriggerPlugin[Any, Any], ...]:
    """Every trigger of this package, in `TriggerKind`'s order (the order the service builds
    them): each module's `PLUGIN`. Two plugins of one kind, or a plugin of a kind that
    starts its captures itself (`NOT_PLUGINS`), are refused."""
    import profiler_service.trigger as package

    found: dict[TriggerKind, TriggerPlugin[Any, Any]] = {}
    for module in pkgutil.iter_modules(package.__path__):
        name = f"{package.__name__}.{module.name}"
        plugin = getattr(importlib.import_module(name), "PLUGIN", None)
        if not isinstance(plugin, TriggerPlugin):
            continue
        if plugin.kind in NOT_PLUGINS:
            raise TypeError(f"trigger/{module.name}.py: {plugin.kind} captures start elsewhere")
        if plugin.kind in found:
            raise TypeError(f"trigger/{module.name}.py: a second plugin of kind {plugin.kind}")
        found[plugin.kind] = plugin
    return tuple(found[kind] for kind in TriggerKind if kind in found)
