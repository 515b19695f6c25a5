"""Tenants in the authentication alone: the tokens file, the scopes and reach each token earns,
and the file's reload (with a clock the test moves). The hub's routes with real processes are in
tests/hub/test_tenants.py."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from profiler_service.api.auth import Authenticator, Scope
from profiler_service.config import HubSettings, ServerSettings, WebhookSettings
from profiler_service.errors import Forbidden, Unauthorized
from profiler_service.tenancy import EVERYWHERE, Reach, TenantTokens, load_token_file

S = Scope
TEAM_A = "team-a-secret-0123456789"
ADMIN = "platform-secret-0123456789"


def write(path: Path, tokens: list[dict]) -> Path:
    staged = path.with_suffix(".new")
    staged.write_text(json.dumps({"tokens": tokens}))
    os.replace(staged, path)  # as the kubelet swaps a Secret's files
    return path


def team_tokens(path: Path) -> Path:
    return write(path, [
        {"name": "team-a", "sha256": hashlib.sha256(TEAM_A.encode()).hexdigest(),
         "read": ["team-a", "team-a-dev"], "capture": ["team-a"]},
        {"name": "viewer", "token": "viewer-secret-0123456", "read": ["team-b"]},
        {"name": "platform", "token": ADMIN, "read": ["*"], "capture": ["*"]},
    ])  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def authenticator(path: Path, clock: Clock | None = None, **settings) -> Authenticator:
    tenants = TenantTokens(path, clock or Clock())
    return Authenticator(
        ServerSettings(**settings), WebhookSettings(**settings), hub_vouches=False, tenants=tenants
    )


def test_a_tenant_token_earns_read_and_capture_where_the_file_says(tmp_path):
    a = authenticator(team_tokens(tmp_path / "tokens.json"), api_token="api-token-0123")
    grant, who = a.grant(f"Bearer {TEAM_A}")
    assert set(grant.scope_set) == {S.READ, S.CAPTURE} and who.name == "tenant:team-a"
    assert grant.reach(S.READ) == Reach(frozenset({"team-a", "team-a-dev"}))
    assert grant.reach(S.CAPTURE) == Reach(frozenset({"team-a"}))
    viewer, _ = a.grant("Bearer viewer-secret-0123456")
    assert set(viewer.scope_set) == {S.READ}
    with pytest.raises(Forbidden):
        a.require(viewer, S.CAPTURE)
    admin, _ = a.grant(f"Bearer {ADMIN}")
    assert admin.reach(S.READ) is EVERYWHERE and admin.reach(S.CAPTURE) is EVERYWHERE
    api, who = a.grant("Bearer api-token-0123")  # the API token stays the operator's: all
    assert who.name == "api" and api.reach(S.READ) is EVERYWHERE


def test_with_tenants_nobody_reads_or_captures_without_a_token(tmp_path):
    a = authenticator(
        team_tokens(tmp_path / "tokens.json"), webhook_token="hook-0123456789", hub_token="fleet"
    )
    anonymous, _ = a.grant(None)
    assert S.READ not in anonymous.scope_set and S.CAPTURE not in anonymous.scope_set
    with pytest.raises(Unauthorized) as raised:
        a.require(anonymous, S.READ)
    assert raised.value.headers["WWW-Authenticate"] == "Bearer"
    receiver, _ = a.grant("Bearer hook-0123456789")
    assert set(receiver.scope_set) == {S.WEBHOOK}  # it posts alerts, as before; it reads nothing
    with pytest.raises(Forbidden):
        a.require(receiver, S.READ)
    wrong, _ = a.grant("Bearer not-a-token-of-the-file")
    with pytest.raises(Forbidden):
        a.require(wrong, S.READ)


def test_the_file_is_reloaded_when_it_changes_and_a_bad_version_keeps_the_last(tmp_path, caplog):
    path = team_tokens(tmp_path / "tokens.json")
    clock = Clock()
    a = authenticator(path, clock)
    newcomer = "team-c-secret-0123456789"
    write(path, [{"name": "team-c", "token": newcomer, "read": ["team-c"]}])
    assert a.grant(f"Bearer {newcomer}")[1].name == "anonymous"  # looked at once a second
    clock.now += 1.5
    assert a.grant(f"Bearer {newcomer}")[1].name == "tenant:team-c"
    assert a.grant(f"Bearer {TEAM_A}")[1].name == "anonymous"  # removed
    (tmp_path / "tokens.json.new").write_text('{"tokens": [{"name": "x"}]}')
    os.replace(tmp_path / "tokens.json.new", path)
    clock.now += 1.5
    assert a.grant(f"Bearer {newcomer}")[1].name == "tenant:team-c"
    assert "the previous tokens stay in force" in caplog.text
    assert a.tenants is not None and a.tenants.reloads_total == 1


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ([{"name": "a", "read": ["x"]}], "exactly one of 'token' and 'sha256'"),
        ([{"name": "a", "token": "t" * 20, "sha256": "0" * 64, "read": ["x"]}], "exactly one"),
        ([{"name": "a", "token": "t" * 20}], "may neither read nor capture"),
        ([{"name": "a", "token": "short", "read": ["x"]}], "tokens.0.token"),
        ([{"name": "a", "token": "t" * 20, "read": ["Team_A"]}], "tokens.0.read.0"),
        (
            [
                {"name": "a", "token": "t" * 20, "read": ["x"]},
                {"name": "b", "token": "t" * 20, "read": ["y"]},
            ],
            "its own secret",
        ),
        ([{"name": "a", "token": "t" * 20, "read": ["x"], "admin": True}], "tokens.0.admin"),
    ],
)
def test_a_bad_tokens_file_fails_the_start_naming_what_and_never_the_secret(
    tmp_path, tokens, message
):
    path = write(tmp_path / "tokens.json", tokens)
    with pytest.raises(ValueError) as raised:
        load_token_file(path)
    assert message in str(raised.value) and str(path) in str(raised.value)
    assert "t" * 20 not in str(raised.value)
    with pytest.raises(ValueError, match="tokens file"):
        HubSettings(tokens_file=path)


def test_a_reach_allows_its_namespaces_and_a_missing_namespace_only_everywhere():
    team = Reach.of(["team-a"])
    assert team.allows("team-a") and not team.allows("team-b") and not team.allows(None)
    assert Reach.of(["team-a", "*"]) is EVERYWHERE and EVERYWHERE.allows(None)
