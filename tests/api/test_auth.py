"""The authentication module alone: each credential's scopes, and the error each lack gets."""

from __future__ import annotations

import base64
import time

import pytest

from profiler_service.api.auth import Authenticator, Grant, Scope, sign
from profiler_service.config import ServerSettings, WebhookSettings
from profiler_service.errors import Forbidden, InvalidSignature, Unauthorized

S = Scope
SECRET = "grafana-secret"


def auth(hub_vouches: bool = True, **settings) -> Authenticator:
    """Built from its two groups alone: the server's credentials and the webhooks'."""
    server = ServerSettings(**settings)
    return Authenticator(server, WebhookSettings(**settings), hub_vouches=hub_vouches)


def bearer(token: str) -> str:
    return f"Bearer {token}"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def scopes(a: Authenticator, header: str | None) -> set[Scope]:
    return set(a.grant(header)[0].scope_set)


ALL = {"api_token": "api", "webhook_token": "hook", "hub_token": "fleet"}


def test_nothing_configured_leaves_everything_open():
    a = auth()
    assert scopes(a, None) == {S.READ, S.CAPTURE, S.WEBHOOK, S.REGISTER}
    assert scopes(a, bearer("anything")) == {S.READ, S.CAPTURE, S.WEBHOOK, S.REGISTER}


@pytest.mark.parametrize(
    ("header", "who", "expected"),
    [
        (None, "anonymous", {S.READ}),
        (bearer("nope"), "anonymous", {S.READ}),
        (bearer("api"), "api", {S.READ, S.CAPTURE}),
        (bearer("hook"), "webhook", {S.READ, S.WEBHOOK}),
        (bearer("fleet"), "hub", {S.READ, S.CAPTURE, S.WEBHOOK, S.REGISTER, S.HUB}),
        (basic("am", "pw"), "webhook", {S.READ, S.WEBHOOK}),
        (basic("am", "wrong"), "anonymous", {S.READ}),
        ("Basic not-base64!", "anonymous", {S.READ}),
        ("Digest abc", "anonymous", {S.READ}),
    ],
)
def test_each_credential_earns_its_scopes(header, who, expected):
    a = auth(**ALL, webhook_username="am", webhook_password="pw")
    grant, principal = a.grant(header)
    assert set(grant.scope_set) == expected
    assert principal.name == who
    assert principal.is_authenticated is (who != "anonymous")


def test_the_api_token_stands_in_for_missing_webhook_and_hub_tokens():
    a = auth(api_token="api")
    assert scopes(a, bearer("api")) == {S.READ, S.CAPTURE, S.WEBHOOK, S.REGISTER}
    assert scopes(a, None) == {S.READ}
    # With its own webhook token and hub token set, the API token is for the API alone.
    assert scopes(auth(**ALL), bearer("api")) == {S.READ, S.CAPTURE}


def test_anyone_may_post_alerts_only_without_webhook_credentials_and_api_token():
    assert S.WEBHOOK in scopes(auth(hub_token="fleet"), None)
    assert S.WEBHOOK not in scopes(auth(api_token="api"), None)
    assert S.WEBHOOK not in scopes(auth(webhook_token="hook"), None)
    assert S.CAPTURE in scopes(auth(webhook_token="hook"), None)


def test_the_hub_token_vouches_only_on_a_sidecar():
    on_hub = auth(hub_vouches=False, **ALL)
    assert scopes(on_hub, bearer("fleet")) == {S.READ, S.CAPTURE, S.WEBHOOK, S.REGISTER}
    with_secret = auth(hub_vouches=True, webhook_hmac_secret=SECRET, **ALL)
    assert not with_secret.needs_signature(with_secret.grant(bearer("fleet"))[0], "grafana")
    assert with_secret.needs_signature(with_secret.grant(bearer("hook"))[0], "grafana")
    assert not with_secret.needs_signature(with_secret.grant(bearer("hook"))[0], "alertmanager")
    hub = auth(hub_vouches=False, webhook_hmac_secret=SECRET, **ALL)
    assert hub.needs_signature(hub.grant(bearer("fleet"))[0], "grafana")


@pytest.mark.parametrize(
    ("scope", "header", "error", "challenge"),
    [
        (S.CAPTURE, None, Unauthorized, "Bearer"),
        (S.CAPTURE, basic("am", "pw"), Unauthorized, "Bearer"),  # not a bearer token: 401
        (S.CAPTURE, "Bearer ", Unauthorized, "Bearer"),
        (S.CAPTURE, bearer("nope"), Forbidden, None),
        (S.CAPTURE, bearer("hook"), Forbidden, None),
        (S.REGISTER, None, Unauthorized, "Bearer"),
        (S.REGISTER, bearer("api"), Forbidden, None),  # the hub token is set: only it
        (S.WEBHOOK, None, Unauthorized, 'Bearer, Basic realm="profiler-service webhooks"'),
        (S.WEBHOOK, "Digest abc", Unauthorized, 'Bearer, Basic realm="profiler-service webhooks"'),
        (S.WEBHOOK, bearer("api"), Forbidden, None),
        (S.WEBHOOK, basic("am", "nope"), Forbidden, None),
        (S.WEBHOOK, "Basic not-base64!", Forbidden, None),
    ],
)
def test_a_missing_scope_is_401_when_nothing_usable_was_sent_else_403(
    scope, header, error, challenge
):
    a = auth(**ALL, webhook_username="am", webhook_password="pw")
    with pytest.raises(error) as raised:
        a.require(a.grant(header)[0], scope)
    assert raised.value.code == ("unauthorized" if error is Unauthorized else "forbidden")
    assert raised.value.headers.get("WWW-Authenticate") == challenge


def test_the_webhook_challenge_names_only_what_is_configured():
    a = auth(webhook_username="am", webhook_password="pw")
    with pytest.raises(Unauthorized) as raised:
        a.require(a.grant(None)[0], S.WEBHOOK)
    assert raised.value.headers["WWW-Authenticate"] == 'Basic realm="profiler-service webhooks"'
    assert raised.value.detail == "webhooks need an Authorization header: Basic"
    with pytest.raises(Forbidden):  # a bearer token where only basic is taken
        a.require(a.grant(bearer("x"))[0], S.WEBHOOK)


def test_a_right_credential_passes():
    a = auth(**ALL, webhook_username="am", webhook_password="pw")
    a.require(a.grant(bearer("api"))[0], S.CAPTURE)
    a.require(a.grant(bearer("fleet"))[0], S.REGISTER)
    a.require(a.grant(basic("am", "pw"))[0], S.WEBHOOK)
    a.require(a.grant(None)[0], S.READ)


def test_a_signature_earns_signed_and_stands_in_for_the_api_token_only():
    body, now = b'{"alerts": []}', time.time()
    headers = {"X-Grafana-Alerting-Signature": sign(SECRET, body)}
    instead_of_api = auth(api_token="api", webhook_hmac_secret=SECRET)
    assert instead_of_api.signature(headers, body, now) == {S.SIGNED, S.WEBHOOK}
    beside_token = auth(webhook_token="hook", webhook_hmac_secret=SECRET)
    assert beside_token.signature(headers, body, now) == {S.SIGNED}
    grant = Grant(frozenset({S.READ}), None)
    grant.add(instead_of_api.signature(headers, body, now))
    instead_of_api.require(grant, S.WEBHOOK)
    assert "webhook" in grant.scopes
    assert auth().signature({}, body, now) == frozenset()  # no secret: nothing to check


@pytest.mark.parametrize(
    ("headers", "sentence"),
    [
        ({}, "X-Sig header is missing"),
        ({"X-Sig": "00"}, "must carry its signing time: the X-Ts header is missing"),
        ({"X-Sig": "00", "X-Ts": "soon"}, "not Unix seconds"),
        ({"X-Sig": "00", "X-Ts": "1000"}, "s old; at most 300 s"),
        ({"X-Sig": "00", "X-Ts": "100000"}, "in the future"),
        ({"X-Sig": "00", "X-Ts": "50000"}, "does not match the body (HMAC-SHA256 over timestamp"),
    ],
)
def test_a_bad_signature_is_invalid_signature(headers, sentence):
    a = auth(
        webhook_hmac_secret=SECRET,
        webhook_hmac_header="X-Sig",
        webhook_hmac_timestamp_header="X-Ts",
        webhook_hmac_max_age_s=300,
    )
    with pytest.raises(InvalidSignature) as raised:
        a.signature(headers, b"{}", now_s=50_000)
    assert raised.value.code == "invalid_signature" and raised.value.status_code == 401
    assert sentence in raised.value.detail
    good = {"X-Sig": sign(SECRET, b"{}", "50000"), "X-Ts": "50000"}
    assert S.SIGNED in a.signature(good, b"{}", now_s=50_100)


def _declared(routes) -> dict[str, str]:
    """Each route's scope, read from the `requires()` it declares ("-": none)."""
    from helpers import api_routes

    table = {}
    for route in api_routes(routes):
        found = [getattr(d.call, "scope", None) for d in route.dependant.dependencies]
        for method in route.methods:
            table[f"{method} {route.path}"] = str(next((s for s in found if s), "-"))
    return table


def test_every_route_declares_the_scope_it_needs():
    """The route table: a route added without a scope fails here, not in production."""
    from profiler_service.api.app import create_app
    from profiler_service.hub.app import create_hub_app

    shared = {
        "GET /profiles": "read",
        "GET /profiles/{snapshot_id}": "read",
        "GET /profiles/{snapshot_id}/report": "read",
        "GET /profiles/{snapshot_id}/files/{name:path}": "read",
        "GET /webhooks/alerts": "read",
        # The receiver checks these itself: header credentials first, Grafana's signature
        # after the body (webhook_needs_signature, check_signature).
        "POST /webhooks/grafana": "-",
        "POST /webhooks/alertmanager": "-",
        "GET /healthz": "-",
        "GET /readyz": "-",
        "GET /metrics": "read",  # open, unless the hub has tenants (a token per namespace)
    }
    sidecar = {
        **shared,
        "POST /profile": "capture",
        "DELETE /profiles/{snapshot_id}": "capture",
        "PUT /profiles/{snapshot_id}/pin": "capture",
        "DELETE /profiles/{snapshot_id}/pin": "capture",
        "PUT /profiles/{snapshot_id}/baseline": "capture",
        "GET /baselines": "read",
        "GET /profiles/{snapshot_id}/compare": "read",
    }
    hub = {
        **shared,
        "POST /profile": "capture",
        "PUT /sidecars/{name}": "register",
        "DELETE /sidecars/{name}": "register",
        "GET /sidecars": "read",
        "GET /fleet": "read",
        "GET /fleet/ledger": "read",
        "GET /fleet/explain": "read",
    }
    ignore = ("/openapi.json", "/docs", "/redoc")
    for app, expected in [(create_app(None), sidecar), (create_hub_app(None), hub)]:
        declared = {
            k: v for k, v in _declared(app.routes).items() if not k.split()[1].startswith(ignore)
        }
        assert declared == expected


def test_through_the_app_reads_stay_open_and_each_route_gets_its_own_answer(make_service):
    """The middleware grants once; wrong credentials cost a read nothing, and a capture route
    answers 401 to basic credentials (not a bearer token) but 403 to a wrong bearer token."""
    from fastapi.testclient import TestClient

    from profiler_service.api.app import create_app

    service = make_service(**ALL, webhook_username="am", webhook_password="pw")
    with TestClient(create_app(service)) as client:
        for header in [None, bearer("nope"), basic("am", "pw"), "Digest x"]:
            headers = {"Authorization": header} if header else {}
            assert client.get("/profiles", headers=headers).status_code == 200
        as_basic = client.post("/profile", headers={"Authorization": basic("am", "pw")})
        assert as_basic.status_code == 401 and as_basic.headers["WWW-Authenticate"] == "Bearer"
        wrong = client.delete("/profiles/x/pin", headers={"Authorization": bearer("hook")})
        assert wrong.status_code == 403 and wrong.json()["error"] == "forbidden"
        hub_capture = client.post(
            "/profile", params={"duration": "abc"}, headers={"Authorization": bearer("fleet")}
        )
        assert hub_capture.status_code == 422  # past authentication, into validation
