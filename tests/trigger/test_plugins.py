"""The trigger registry is its kinds: every `TriggerKind` but the API's and the CLI's has one
plugin in trigger/, found without a list to add it to, and the service builds each."""

from __future__ import annotations

import sys

import pytest

import profiler_service.trigger as trigger_package
from profiler_service.config import GrafanaSettings, Schedule, ScheduleSettings, Settings
from profiler_service.models import TriggerKind
from profiler_service.trigger import alerts, memory_watch, schedule
from profiler_service.trigger.plugin import NOT_PLUGINS, group_of, plugins


def test_every_kind_but_the_api_and_the_cli_has_one_plugin_in_its_order():
    assert [p.kind for p in plugins()] == [k for k in TriggerKind if k not in NOT_PLUGINS]
    assert plugins() == (alerts.PLUGIN, schedule.PLUGIN, memory_watch.PLUGIN)


def test_each_plugin_is_built_from_its_own_settings_group():
    """A trigger reads one group, named by its class on the `Settings` root, never the root."""
    settings = Settings(
        schedules=[Schedule(target="trainer", interval_s=60)], targets="trainer=grpc://127.0.0.1:9"
    )
    assert [p.settings for p in plugins()] == [
        type(settings.webhook),
        ScheduleSettings,
        type(settings.watch),
    ]
    assert group_of(settings, ScheduleSettings) is settings.schedule
    assert group_of(settings, GrafanaSettings) is settings.grafana
    with pytest.raises(TypeError, match="0 Schedule groups"):
        group_of(settings, Schedule)  # type: ignore[type-var]


def test_a_new_module_with_a_plugin_is_found_and_a_second_of_one_kind_refused(
    tmp_path, monkeypatch
):
    """A module dropped into trigger/ is registered by its PLUGIN alone; one whose kind another
    plugin has, or whose captures start elsewhere, is refused, not built twice."""
    monkeypatch.setattr(trigger_package, "__path__", [*trigger_package.__path__, str(tmp_path)])
    name = f"{trigger_package.__name__}.extra"
    try:
        for kind, refused in (("SCHEDULE", "a second plugin"), ("API", "start elsewhere")):
            sys.modules.pop(name, None)
            (tmp_path / "extra.py").write_text(
                "from profiler_service.config import Group\n"
                "from profiler_service.models import TriggerKind\n"
                "from profiler_service.trigger.plugin import TriggerPlugin\n"
                f"PLUGIN = TriggerPlugin(TriggerKind.{kind}, Group, lambda parts: None)\n"
            )
            with pytest.raises(TypeError, match=refused):
                plugins()
    finally:
        sys.modules.pop(name, None)


def test_the_service_builds_every_plugin_its_settings_turn_on(make_service):
    service = make_service(schedules=[Schedule(target="trainer", interval_s=60)])
    assert service.alerts is service.triggers.get(alerts.PLUGIN) is not None
    assert service.scheduler is service.triggers.get(schedule.PLUGIN) is not None
    assert len(service.triggers.all()) == len(plugins()) - (service.memory_watch is None)
