"""Settings: target specs from flags/env, address validation, duration bounds, bind safety."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import EnvSettingsSource

from profiler_service.config import (
    BoundsSettings,
    CaptureSettings,
    HubSettings,
    ServerSettings,
    Settings,
    WatchSettings,
)
from profiler_service.targets import Target, TargetKind, in_process_target


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch):
    """Settings read PROFILER_* from the environment; start every test without any."""
    for name in list(os.environ):
        if name.upper().startswith("PROFILER_"):
            monkeypatch.delenv(name)


# ---- targets ------------------------------------------------------------------------------


def test_single_url_becomes_the_default_target():
    settings = CaptureSettings(targets="grpc://127.0.0.1:6009")
    assert len(settings.targets) == 1
    target = settings.targets[0]
    assert target.name == "default"
    assert target.kind is TargetKind.GRPC
    assert target.workers == ["127.0.0.1:6009"]
    assert target.service_addr == "127.0.0.1:6009"
    assert settings.target(None) is target
    assert settings.target("default") is target


def test_named_targets_with_several_workers():
    settings = CaptureSettings(targets="a=grpc://h:1,grpc://h2:2 b=grpc://h3:3")
    assert [t.name for t in settings.targets] == ["a", "b"]
    assert settings.targets[0].workers == ["h:1", "h2:2"]
    assert settings.targets[0].service_addr == "h:1"
    assert settings.targets[1].workers == ["h3:3"]
    assert settings.target("b") is settings.targets[1]
    assert settings.target("c") is None


def test_semicolon_separated_specs():
    settings = CaptureSettings(targets="a=grpc://h:1;b=grpc://h:2")
    assert [(t.name, t.workers) for t in settings.targets] == [("a", ["h:1"]), ("b", ["h:2"])]


def test_unnamed_specs_after_the_first_get_numbered_names():
    settings = CaptureSettings(targets="grpc://h:1 grpc://h:2")
    assert [t.name for t in settings.targets] == ["default", "target-1"]


def test_targets_from_a_json_list():
    settings = CaptureSettings(
        targets='[{"name": "x", "workers": ["grpc://h:1", "h2:2"]}, '
        '{"name": "y", "workers": "h3:3"}]'
    )
    assert [(t.name, t.workers) for t in settings.targets] == [
        ("x", ["h:1", "h2:2"]),
        ("y", ["h3:3"]),
    ]


def test_json_list_of_spec_strings_is_parsed_like_the_plain_form():
    # A Python list of specs is accepted; the same list written as JSON must be too.
    assert [t.name for t in CaptureSettings(targets=["a=grpc://h:1", "grpc://h:2"]).targets] == [
        "a",
        "target-1",
    ]
    settings = CaptureSettings(targets='["a=grpc://h:1", "grpc://h:2"]')
    assert [(t.name, t.workers) for t in settings.targets] == [
        ("a", ["h:1"]),
        ("target-1", ["h:2"]),
    ]


def test_address_without_scheme_and_ipv6_are_accepted():
    assert Target.parse("10.0.0.5:6009").workers == ["10.0.0.5:6009"]
    assert Target.parse("grpc://[::1]:6009").workers == ["[::1]:6009"]


def test_empty_targets_means_none():
    assert CaptureSettings(targets="").targets == []
    assert CaptureSettings().targets == []
    assert CaptureSettings().target(None) is None


@pytest.mark.parametrize(
    "spec",
    [
        "grpc://host",
        "http://x:1:2",
        "grpc://h:70000",
        "grpc://h:0",
        "grpc://h:65536",
        "http://h:1",
        "grpc://h:1/path",
        "grpc://:1",
        "a=",
        "Bad_Name=grpc://h:1",
    ],
)
def test_invalid_target_specs_are_rejected(spec: str):
    with pytest.raises(ValidationError):
        CaptureSettings(targets=spec)


def test_duplicate_target_names_are_rejected():
    with pytest.raises(ValidationError, match="unique"):
        CaptureSettings(targets="a=grpc://h:1 a=grpc://h:2")


def test_grpc_target_needs_an_address_and_in_process_takes_none():
    with pytest.raises(ValidationError):
        Target(name="x")
    with pytest.raises(ValidationError):
        Target(name="x", kind=TargetKind.IN_PROCESS, workers=["h:1"])
    local = in_process_target()
    assert local.kind is TargetKind.IN_PROCESS
    assert local.service_addr == "in-process"


# ---- durations ----------------------------------------------------------------------------


def test_duration_defaults_are_consistent():
    settings = BoundsSettings()
    assert settings.duration_min_s <= settings.duration_default_s <= settings.duration_max_s


@pytest.mark.parametrize(
    "kwargs",
    [
        {"duration_default_s": 61},
        {"duration_default_s": 0.05},
        {"duration_default_s": 5, "duration_max_s": 4},
        {"duration_default_s": 5, "duration_min_s": 6},
        {"duration_default_s": 0},
    ],
)
def test_default_duration_outside_bounds_is_rejected(kwargs: dict):
    with pytest.raises(ValidationError):
        BoundsSettings(**kwargs)


def test_default_duration_on_a_bound_is_accepted():
    assert BoundsSettings(duration_default_s=60).duration_default_s == 60
    assert BoundsSettings(duration_default_s=0.1).duration_default_s == 0.1


# ---- bind safety --------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "", "example.com"])
def test_non_loopback_bind_without_token_is_refused(host: str):
    settings = ServerSettings(host=host)
    assert settings.binds_loopback is False
    with pytest.raises(ValueError, match="PROFILER_API_TOKEN"):
        settings.check_bind_is_safe()


def test_non_loopback_bind_with_token_is_allowed():
    settings = ServerSettings(host="0.0.0.0", api_token="s3cret")
    settings.check_bind_is_safe()
    assert settings.api_token is not None
    assert settings.api_token.get_secret_value() == "s3cret"


def test_non_loopback_bind_when_insecure_is_allowed():
    ServerSettings(host="0.0.0.0", insecure=True).check_bind_is_safe()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_bind_needs_no_token(host: str):
    settings = ServerSettings(host=host)
    assert settings.binds_loopback is True
    settings.check_bind_is_safe()


# ---- environment --------------------------------------------------------------------------


def test_targets_and_store_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("PROFILER_TARGETS", "train=grpc://10.0.0.7:6009,grpc://10.0.0.8:6009")
    monkeypatch.setenv("PROFILER_STORE", str(tmp_path / "profiles"))
    settings = Settings()
    assert [(t.name, t.workers) for t in settings.capture.targets] == [
        ("train", ["10.0.0.7:6009", "10.0.0.8:6009"])
    ]
    assert settings.storage.store == tmp_path / "profiles"


def test_json_targets_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_TARGETS", '[{"name": "j", "workers": "grpc://h:9"}]')
    assert [(t.name, t.workers) for t in Settings().capture.targets] == [("j", ["h:9"])]


def test_invalid_target_in_the_environment_is_rejected(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_TARGETS", "grpc://host")
    with pytest.raises(ValidationError):
        Settings()


def test_other_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_HOST", "0.0.0.0")
    monkeypatch.setenv("PROFILER_API_TOKEN", "tok")
    monkeypatch.setenv("PROFILER_DURATION_DEFAULT_S", "2.5")
    settings = Settings()
    assert settings.server.host == "0.0.0.0"
    assert settings.bounds.duration_default_s == 2.5
    settings.server.check_bind_is_safe()


def test_explicit_arguments_override_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_TARGETS", "grpc://h:1")
    assert Settings(targets="z=grpc://h:2").capture.targets[0].name == "z"


# ---- groups -------------------------------------------------------------------------------

# Every variable the service has read since before the settings were grouped: the contract.
NAMES = [
    "host", "port", "insecure", "api_token", "store", "store_url", "store_options",
    "store_refresh_s", "store_retry_max_s", "capture_url", "targets", "duration_default_s",
    "duration_min_s", "duration_max_s", "capture_grace_s", "capture_attempts",
    "capture_max_workers", "analysis_timeout_s", "analysis_python", "analysis_max_memory_bytes",
    "analysis_worker_idle_s", "analysis_worker_max_jobs", "analysis_worker_recycle_bytes",
    "shutdown_grace_s", "host_tracer_level", "python_tracer_level", "device_tracer_level",
    "include_dataset_ops", "python_stacks_hz", "py_spy", "py_spy_pid", "retention_max_count",
    "retention_max_bytes",
    "tensorboard_url",
    "tensorboard_flavour", "public_url", "webhook_token", "webhook_username", "webhook_password",
    "webhook_hmac_secret", "webhook_hmac_header", "webhook_hmac_timestamp_header",
    "webhook_hmac_max_age_s", "webhook_max_body_bytes", "webhook_cooldown_s",
    "webhook_min_interval_s", "webhook_target_rules", "webhook_target_labels",
    "webhook_default_target", "grafana_url", "grafana_token", "grafana_annotation_attempts",
    "grafana_timeout_s", "capture_labels", "schedules", "regression_max_share", "lookback_s",
    "lookback_interval_s", "watch_process", "job_metrics_url", "prometheus_url",
    "prometheus_queries",
    "prometheus_timeout_s", "pod_name", "pod_namespace", "lookback_trace_s", "hub_url",
    "hub_token", "hub_advertise_url", "hub_heartbeat_s", "hub_register_in_bucket",
    "hub_sidecar_ttl_s", "hub_sync_interval_s", "hub_forward_timeout_s", "memory_watch",
    "memory_watch_share", "memory_watch_horizon_s", "memory_watch_growth_min_share",
    "memory_watch_window_s", "memory_watch_cooldown_s", "memory_watch_duration_s",
    "memory_watch_capacity_bytes", "memory_watch_target", "workload", "tokens_file",
    # the fleet index's (hub)
    "hub_full_sync_interval_s", "hub_database_url",
    # the fleet ledger's (hub)
    "hub_prometheus_url", "hub_gpu_util_query", "hub_gpu_util_max", "hub_gpu_namespace_label",
    "hub_gpu_pod_label", "hub_gpu_model_label", "hub_ledger_resolution_s", "hub_ledger_bucket_s",
    "hub_ledger_capture_horizon_s", "hub_gpu_hour_prices", "hub_gpu_hour_currency",
    "hub_ledger_metric_window_s",
    "hub_ledger_refresh_s", "hub_prometheus_timeout_s", "hub_gpu_scrape_interval_s",
    # the hub's captures for the ledger's unexplained idle hours
    "hub_explain_idle", "hub_explain_captures_per_h", "hub_explain_duration_s",
]  # fmt: skip


def test_every_variable_keeps_its_name_in_exactly_one_group():
    names = {**Settings.owners, **HubSettings.owners}
    assert sorted(names) == sorted(NAMES)
    for root in (Settings, HubSettings):
        for name, (group, field) in root.owners.items():
            assert root.groups()[group].model_fields[field].validation_alias == name


def test_a_group_names_its_fields_without_its_prefix_and_its_settings_with_it():
    """A field's outward name is the group's prefix and its own, or the one it names; the
    outward names are the configuration page's, each read from PROFILER_<NAME> alone (not
    from a variable named after the field)."""
    named = {
        "memory_watch": "enabled",
        "tokens_file": "tokens_file",
        "hub_explain_idle": "enabled",
    } | {f"capture_{f}": f for f in ("url", "attempts", "max_workers", "labels")}
    page = (Path(__file__).parents[1] / "docs/reference/configuration.md").read_text()
    documented = re.findall(r"^\| `PROFILER_([A-Z0-9_]+)`", page, re.M)
    outward = []
    for root in (Settings, HubSettings):
        for group in root.groups().values():
            for name, field in group.outward().items():
                assert (name, field) in named.items() or name == group.prefix + field, field
                outward.append(name)
    assert sorted({n.upper() for n in outward}) == sorted(documented)
    for group in {*Settings.groups().values(), *HubSettings.groups().values()}:
        with pytest.MonkeyPatch.context() as env:
            for field in group.outward().values():
                for decoy in (f"PROFILER_{field.upper()}", field.upper()):
                    env.setenv(decoy, "decoy")
            for name in group.outward():
                env.setenv(f"PROFILER_{name.upper()}", f"v-{name}")
            source = EnvSettingsSource(group)
            for name, field in group.outward().items():
                value, _, _ = source.get_field_value(group.model_fields[field], field)
                assert value == f"v-{name}", (group, field)


def test_the_watch_share_is_set_by_its_variable_and_its_flat_name(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("PROFILER_MEMORY_WATCH_SHARE", "0.7")
    monkeypatch.setenv("PROFILER_MEMORY_WATCH", "false")
    monkeypatch.setenv("PROFILER_SHARE", "0.2")  # a variable named after the field: not read
    assert (Settings().watch.share, Settings().watch.enabled) == (0.7, False)
    assert WatchSettings().share == 0.7
    assert Settings(memory_watch_share=0.6, memory_watch=True).watch.share == 0.6
    assert Settings(memory_watch_share=0.6, memory_watch=True).watch.enabled is True
    assert WatchSettings(memory_watch_share=0.5).share == 0.5
    assert Settings.owners["memory_watch_share"] == ("watch", "share")
    with pytest.raises(ValidationError, match="memory_watch_share"):
        Settings(memory_watch_share=3)
    with pytest.raises(ValueError, match="'memory_watch_share', not 'share'"):
        WatchSettings(share=0.5)
    with pytest.raises(ValueError, match="did you mean 'memory_watch_share'"):
        Settings(memory_watch_shar=0.5)


def test_flat_names_and_the_environment_reach_their_group(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_MEMORY_WATCH_SHARE", "0.8")
    monkeypatch.setenv("PROFILER_HUB_FORWARD_TIMEOUT_S", "3")
    settings = Settings(port=9000, memory_watch=False, duration_max_s=10)
    assert settings.server.port == 9000
    assert settings.watch.enabled is False and settings.watch.share == 0.8
    assert settings.bounds.duration_max_s == 10
    assert HubSettings(port=9001).fleet.forward_timeout_s == 3
    given = Settings(bounds=BoundsSettings(duration_max_s=20), duration_default_s=7)
    assert (given.bounds.duration_max_s, given.bounds.duration_default_s) == (20, 7)


def test_a_piece_builds_only_its_group(monkeypatch: pytest.MonkeyPatch):
    """A component's test needs no valid whole: a group reads only its own variables."""
    monkeypatch.setenv("PROFILER_TARGETS", "a=grpc://h:1")
    monkeypatch.setenv("PROFILER_DURATION_DEFAULT_S", "600")  # out of bounds: not read here
    assert CaptureSettings().target_names == ["a"]
    with pytest.raises(ValidationError, match="duration_default_s"):
        BoundsSettings()


def test_cross_group_checks_stay_in_the_root(tmp_path: Path):
    with pytest.raises(ValidationError, match="capture_url must lie outside store_url"):
        Settings(store_url="gs://b/p", capture_url="gs://b/p/incoming")
    with pytest.raises(ValidationError, match="webhook_default_target names target 'x'"):
        Settings(targets="a=grpc://h:1", webhook_default_target="x")


def test_the_hub_takes_only_what_it_uses():
    """No capture, look-back or memory-watch settings; its alert rules name the targets the
    sidecars register, so no target list checks them."""
    groups = HubSettings.groups()
    assert {"capture", "analysis", "lookback", "watch", "schedule", "registration"}.isdisjoint(
        groups
    )
    hub = HubSettings(webhook_default_target="trainer", targets="ignored=grpc://h:1")
    assert hub.webhook.default_target == "trainer"
    assert not hasattr(hub, "capture")
    # Nor what only a sidecar's store and alert trigger read: the sidecar keeps every name.
    sidecar_only = {
        "retention_max_count", "retention_max_bytes", "store_refresh_s", "store_retry_max_s",
        "webhook_cooldown_s", "webhook_min_interval_s",
    }  # fmt: skip
    assert sidecar_only.isdisjoint(HubSettings.owners) and sidecar_only <= set(Settings.owners)
    assert not hasattr(hub.storage, "retention_max_count")
    assert not hasattr(hub.webhook, "cooldown_s")


def test_a_misspelt_setting_is_refused_with_the_nearest_name():
    """`agent.start(duration_max=10)` once dropped the bound silently."""
    with pytest.raises(
        ValueError, match=r"unknown setting 'duration_max'; did you mean 'duration_max_s'"
    ):
        Settings(duration_max=10)
    with pytest.raises(ValueError, match=r"unknown setting 'zzz_nothing_like_it'$"):
        Settings(zzz_nothing_like_it=1)
    # a name of the other root is one the environment may carry for both: not a typo
    assert HubSettings(targets="a=grpc://h:1", store_url="file:///tmp/x").fleet
    assert Settings(hub_sync_interval_s=5).bounds.duration_max_s > 0


def test_the_agent_refuses_a_misspelt_setting_before_it_starts(tmp_path):
    from profiler_service import agent

    with pytest.raises(ValueError, match="did you mean 'duration_max_s'"):
        agent.start(port=0, store=tmp_path, duration_max=10)
