"""Settings: target specs from flags/env, address validation, duration bounds, bind safety."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from profiler_service.config import Settings
from profiler_service.targets import Target, TargetKind, in_process_target


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch):
    """Settings read PROFILER_* from the environment; start every test without any."""
    for name in list(os.environ):
        if name.upper().startswith("PROFILER_"):
            monkeypatch.delenv(name)


# ---- targets ------------------------------------------------------------------------------


def test_single_url_becomes_the_default_target():
    settings = Settings(targets="grpc://127.0.0.1:6009")
    assert len(settings.targets) == 1
    target = settings.targets[0]
    assert target.name == "default"
    assert target.kind is TargetKind.GRPC
    assert target.workers == ["127.0.0.1:6009"]
    assert target.service_addr == "127.0.0.1:6009"
    assert settings.target(None) is target
    assert settings.target("default") is target


def test_named_targets_with_several_workers():
    settings = Settings(targets="a=grpc://h:1,grpc://h2:2 b=grpc://h3:3")
    assert [t.name for t in settings.targets] == ["a", "b"]
    assert settings.targets[0].workers == ["h:1", "h2:2"]
    assert settings.targets[0].service_addr == "h:1"
    assert settings.targets[1].workers == ["h3:3"]
    assert settings.target("b") is settings.targets[1]
    assert settings.target("c") is None


def test_semicolon_separated_specs():
    settings = Settings(targets="a=grpc://h:1;b=grpc://h:2")
    assert [(t.name, t.workers) for t in settings.targets] == [("a", ["h:1"]), ("b", ["h:2"])]


def test_unnamed_specs_after_the_first_get_numbered_names():
    settings = Settings(targets="grpc://h:1 grpc://h:2")
    assert [t.name for t in settings.targets] == ["default", "target-1"]


def test_targets_from_a_json_list():
    settings = Settings(
        targets='[{"name": "x", "workers": ["grpc://h:1", "h2:2"]}, '
        '{"name": "y", "workers": "h3:3"}]'
    )
    assert [(t.name, t.workers) for t in settings.targets] == [
        ("x", ["h:1", "h2:2"]),
        ("y", ["h3:3"]),
    ]


def test_json_list_of_spec_strings_is_parsed_like_the_plain_form():
    # A Python list of specs is accepted; the same list written as JSON must be too.
    assert [t.name for t in Settings(targets=["a=grpc://h:1", "grpc://h:2"]).targets] == [
        "a",
        "target-1",
    ]
    settings = Settings(targets='["a=grpc://h:1", "grpc://h:2"]')
    assert [(t.name, t.workers) for t in settings.targets] == [
        ("a", ["h:1"]),
        ("target-1", ["h:2"]),
    ]


def test_address_without_scheme_and_ipv6_are_accepted():
    assert Target.parse("10.0.0.5:6009").workers == ["10.0.0.5:6009"]
    assert Target.parse("grpc://[::1]:6009").workers == ["[::1]:6009"]


def test_empty_targets_means_none():
    assert Settings(targets="").targets == []
    assert Settings().targets == []
    assert Settings().target(None) is None


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
        Settings(targets=spec)


def test_duplicate_target_names_are_rejected():
    with pytest.raises(ValidationError, match="unique"):
        Settings(targets="a=grpc://h:1 a=grpc://h:2")


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
    settings = Settings()
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
        Settings(**kwargs)


def test_default_duration_on_a_bound_is_accepted():
    assert Settings(duration_default_s=60).duration_default_s == 60
    assert Settings(duration_default_s=0.1).duration_default_s == 0.1


# ---- bind safety --------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "", "example.com"])
def test_non_loopback_bind_without_token_is_refused(host: str):
    settings = Settings(host=host)
    assert settings.binds_loopback is False
    with pytest.raises(ValueError, match="PROFILER_API_TOKEN"):
        settings.check_bind_is_safe()


def test_non_loopback_bind_with_token_is_allowed():
    settings = Settings(host="0.0.0.0", api_token="s3cret")
    settings.check_bind_is_safe()
    assert settings.api_token is not None
    assert settings.api_token.get_secret_value() == "s3cret"


def test_non_loopback_bind_when_insecure_is_allowed():
    Settings(host="0.0.0.0", insecure=True).check_bind_is_safe()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_bind_needs_no_token(host: str):
    settings = Settings(host=host)
    assert settings.binds_loopback is True
    settings.check_bind_is_safe()


# ---- environment --------------------------------------------------------------------------


def test_targets_and_store_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("PROFILER_TARGETS", "train=grpc://10.0.0.7:6009,grpc://10.0.0.8:6009")
    monkeypatch.setenv("PROFILER_STORE", str(tmp_path / "profiles"))
    settings = Settings()
    assert [(t.name, t.workers) for t in settings.targets] == [
        ("train", ["10.0.0.7:6009", "10.0.0.8:6009"])
    ]
    assert settings.store == tmp_path / "profiles"


def test_json_targets_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_TARGETS", '[{"name": "j", "workers": "grpc://h:9"}]')
    assert [(t.name, t.workers) for t in Settings().targets] == [("j", ["h:9"])]


def test_invalid_target_in_the_environment_is_rejected(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_TARGETS", "grpc://host")
    with pytest.raises(ValidationError):
        Settings()


def test_other_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_HOST", "0.0.0.0")
    monkeypatch.setenv("PROFILER_API_TOKEN", "tok")
    monkeypatch.setenv("PROFILER_DURATION_DEFAULT_S", "2.5")
    settings = Settings()
    assert settings.host == "0.0.0.0"
    assert settings.duration_default_s == 2.5
    settings.check_bind_is_safe()


def test_explicit_arguments_override_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROFILER_TARGETS", "grpc://h:1")
    assert Settings(targets="z=grpc://h:2").targets[0].name == "z"
