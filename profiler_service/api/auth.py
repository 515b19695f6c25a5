"""Who may do what: every credential turned into scopes once per request, and one place that
decides, modelled on Starlette's `AuthenticationMiddleware` / `AuthenticationBackend` /
`requires()`.

`install_auth(app, settings)` adds the middleware: for each request it reads the
`Authorization` header once, compares it (in constant time, with every configured secret, so the
time taken says nothing about which matched) and sets `request.auth` (a `Grant`: the scopes) and
`request.user` (a `Principal`). Routes declare what they need with `requires(Scope.X)`; the
webhook receiver asks `webhook_needs_signature()` before reading a body and `check_signature()`
after, since a Grafana signature is a credential that only the body can prove (Alertmanager
sends basic or bearer credentials but cannot sign; Grafana's contact point can also sign:
HMAC-SHA256 in lowercase hex over the body, or over `timestamp:body` with a timestamp header).

Which credential gives which scope:

- anyone (no, or wrong, credentials): `read`; `capture` without `api_token`; `webhook` with
  neither webhook credentials nor `api_token`; `register` with neither `hub_token` nor `api_token`;
- `Bearer <api_token>`: `read`, `capture`; `webhook` without webhook credentials; `register`
  without `hub_token`;
- `Bearer <webhook_token>`, basic `webhook_username:webhook_password`: `read`, `webhook`;
- `Bearer <hub_token>`: `read`, `capture`, `webhook`, `register`; on a sidecar also `hub` (it
  forwards alerts the hub authenticated, Grafana's signature included);
- a valid, fresh Grafana signature (`webhook_hmac_secret`): `signed`; `webhook` without webhook
  credentials (it replaces `api_token` there);
- the hub's tenants (`tokens_file`, profiler_service/tenancy.py): a token of the file earns
  `read` and/or `capture`, each with its reach (the namespaces it applies to); with the file,
  nobody reads or captures without a token: anyone, the webhook token and basic auth lose `read`
  and `capture`. Every other credential reaches every namespace.

A missing scope is `401 unauthorized` (with `WWW-Authenticate`) when no credential of a kind the
route takes was sent, else `403 forbidden`; a bad signature is `401 invalid_signature`. Where a
scope applies is the grant's `reach`: routes do not check it, the reads they are handed do
(api/tenants.py), and so do the hub's listings and its capture routing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated

from fastapi import Depends, FastAPI, Request, params
from fastapi.security import HTTPBearer
from pydantic import SecretStr
from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection

from profiler_service.config import AppSettings, ServerSettings, WebhookSettings
from profiler_service.errors import Forbidden, InvalidSignature, Unauthorized
from profiler_service.tenancy import EVERYWHERE, Reach, TenantTokens

__all__ = [
    "Authenticator",
    "Grant",
    "Principal",
    "Scope",
    "check_signature",
    "install_auth",
    "reach",
    "requires",
    "sign",
    "webhook_needs_signature",
]

_REALM = 'Basic realm="profiler-service webhooks"'


class Scope(StrEnum):
    READ = "read"  # snapshots, reports, files, comparisons, the alert log, the fleet page, /metrics
    CAPTURE = "capture"  # start captures; delete, pin, unpin, set baselines
    WEBHOOK = "webhook"  # post alerts
    SIGNED = "signed"  # the body carries a valid Grafana signature (granted after reading it)
    REGISTER = "register"  # register a sidecar with the hub
    HUB = "hub"  # the fleet hub forwarding: it checked the sender, and Grafana's signature


@dataclass(frozen=True)
class Principal(BaseUser):
    """Who the credentials say is asking: `anonymous`, `api`, `webhook`, `hub`, or
    `tenant:<name>` (a token of the tokens file)."""

    name: str = "anonymous"

    @property
    def is_authenticated(self) -> bool:
        return self.name != "anonymous"

    @property
    def display_name(self) -> str:
        return self.name


class Grant(AuthCredentials):
    """The request's scopes, where each applies (a tenant's `read` and `capture` reach some
    namespaces; every other scope, and every other credential's, reaches all), and the scheme
    it presented credentials in (`bearer`, `basic`, or None), which tells 401 (nothing usable
    sent) from 403 (wrong credentials)."""

    def __init__(
        self,
        scopes: frozenset[Scope],
        scheme: str | None,
        reach: Mapping[Scope, Reach] | None = None,
    ):
        super().__init__(sorted(scopes))
        self.scope_set = scopes
        self.scheme = scheme
        self._reach = dict(reach or {})

    def reach(self, scope: Scope) -> Reach:
        """Where `scope` applies (every namespace unless a tenant token narrowed it)."""
        return self._reach.get(scope, EVERYWHERE)

    def add(self, scopes: frozenset[Scope]) -> None:
        self.scope_set = self.scope_set | scopes
        self.scopes = sorted(self.scope_set)


@dataclass(frozen=True)
class _Challenge:
    """What a missing scope answers: the schemes that count as trying, and the sentences."""

    schemes: frozenset[str]
    www_authenticate: str
    missing: str
    wrong: str


@dataclass
class Authenticator(AuthenticationBackend):
    """The settings' secrets, and the scopes each one grants (the table in the module doc)."""

    server: ServerSettings
    webhook: WebhookSettings
    hub_vouches: bool = True  # a sidecar: the hub token stands in for a Grafana signature
    tenants: TenantTokens | None = None  # the hub's tokens file
    _bearer: list[tuple[bytes, str, frozenset[Scope]]] = field(init=False)
    _anonymous: frozenset[Scope] = field(init=False)
    _challenges: dict[Scope, _Challenge] = field(init=False)
    _basic: tuple[bytes, bytes] | None = field(init=False)
    signature_grants: frozenset[Scope] = field(init=False)

    def __post_init__(self) -> None:
        s, w = self.server, self.webhook
        basic = w.username is not None and w.password is not None
        hook_creds = w.token is not None or basic
        self.signature_grants = frozenset({Scope.SIGNED}) | (
            frozenset() if hook_creds else frozenset({Scope.WEBHOOK})
        )
        # With tenants, reading and capturing need a token (else anyone reaches everywhere).
        anonymous = set() if self.tenants is not None else {Scope.READ}
        if s.api_token is None:
            if self.tenants is None:
                anonymous.add(Scope.CAPTURE)
            if not hook_creds:
                anonymous.add(Scope.WEBHOOK)
            if s.hub_token is None:
                anonymous.add(Scope.REGISTER)
        self._anonymous = frozenset(anonymous)
        api = {Scope.READ, Scope.CAPTURE}
        if not hook_creds:
            api.add(Scope.WEBHOOK)
        if s.hub_token is None:
            api.add(Scope.REGISTER)
        hub = {Scope.READ, Scope.CAPTURE, Scope.WEBHOOK, Scope.REGISTER}
        if self.hub_vouches:
            hub.add(Scope.HUB)
        bearer = [(s.api_token, "api", api), (w.token, "webhook", {Scope.WEBHOOK})]
        bearer.append((s.hub_token, "hub", hub))
        self._bearer = [(_raw(t), name, frozenset(g)) for t, name, g in bearer if t is not None]
        self._basic = (
            (w.username.encode(), _raw(w.password)) if basic else None  # type: ignore[union-attr,arg-type]
        )
        # Webhooks: which schemes are asked for, as the receiver's check always said.
        tokens = w.token is not None or s.hub_token is not None
        tokens = tokens or (not hook_creds and s.api_token is not None)
        asked = (["Bearer <token>"] if tokens else []) + (["Basic"] if basic else [])
        self._challenges = {
            Scope.READ: _Challenge(
                frozenset({"bearer"}),
                "Bearer",
                "reading needs an 'Authorization: Bearer <token>' header",
                "these credentials do not give read",
            ),
            Scope.CAPTURE: _Challenge(
                frozenset({"bearer"}),
                "Bearer",
                "this endpoint needs an 'Authorization: Bearer <token>' header",
                "the bearer token is not valid for this service",
            ),
            Scope.REGISTER: _Challenge(
                frozenset({"bearer"}),
                "Bearer",
                "registering needs an 'Authorization: Bearer <hub token>' header",
                "the bearer token is not this fleet's hub token",
            ),
            Scope.WEBHOOK: _Challenge(
                frozenset({"bearer", "basic"}),
                ", ".join((["Bearer"] if tokens else []) + ([_REALM] if basic else [])),
                "webhooks need an Authorization header: " + " or ".join(asked),
                "the webhook credentials are not valid for this service",
            ),
        }

    # ---- credentials -> scopes (once per request, by the middleware) -----------------------

    async def authenticate(self, conn: HTTPConnection) -> tuple[Grant, Principal]:
        return self.grant(conn.headers.get("authorization"))

    def grant(self, authorization: str | None) -> tuple[Grant, Principal]:
        """The scopes an `Authorization` header earns; wrong credentials earn what anyone has."""
        scheme, _, value = (authorization or "").strip().partition(" ")
        scheme, value = scheme.lower(), value.strip()
        if scheme not in ("bearer", "basic") or not value:
            return Grant(self._anonymous, None), Principal()
        scopes, name = set(self._anonymous), "anonymous"
        reach: dict[Scope, Reach] = {}
        if scheme == "bearer":
            given = value.encode()
            # Every configured token is compared, so the time says nothing about which matched.
            matches = [hmac.compare_digest(given, raw) for raw, _, _ in self._bearer]
            for ok, (_, who, granted) in zip(matches, self._bearer, strict=True):
                if ok:
                    scopes |= granted
                    name = who if name == "anonymous" else name
            tenant = self.tenants.match(given) if self.tenants is not None else None
            if tenant is not None and name == "anonymous":
                for scope, where in ((Scope.READ, tenant.read), (Scope.CAPTURE, tenant.capture)):
                    if not where.nowhere:
                        scopes.add(scope)
                        reach[scope] = where
                name = f"tenant:{tenant.name}"
        elif self._basic is not None:
            try:
                user, _, password = base64.b64decode(value, validate=True).partition(b":")
            except (binascii.Error, ValueError):
                user, password = b"", b""
            user_ok = hmac.compare_digest(user, self._basic[0])
            password_ok = hmac.compare_digest(password, self._basic[1])
            if user_ok and password_ok:
                scopes.add(Scope.WEBHOOK)
                name = "webhook"
        return Grant(frozenset(scopes), scheme, reach), Principal(name)

    def signature(self, headers: Mapping[str, str], body: bytes, now_s: float) -> frozenset[Scope]:
        """The scopes a valid, fresh Grafana signature earns; InvalidSignature otherwise."""
        s = self.webhook
        if s.hmac_secret is None:
            return frozenset()
        header = s.hmac_header
        signature = headers.get(header)
        if not signature:
            raise InvalidSignature(f"this webhook must be signed: the {header} header is missing")
        timestamp = None
        if s.hmac_timestamp_header:
            ts_header = s.hmac_timestamp_header
            timestamp = (headers.get(ts_header) or "").strip()
            if not timestamp.isdigit():
                raise InvalidSignature(
                    f"this webhook must carry its signing time: the {ts_header} header is "
                    f"{'missing' if not timestamp else 'not Unix seconds'}"
                )
            age_s = now_s - int(timestamp)
            if abs(age_s) > s.hmac_max_age_s:
                raise InvalidSignature(
                    f"the signature's timestamp is {abs(age_s):.0f} s "
                    f"{'old' if age_s > 0 else 'in the future'}; at most "
                    f"{s.hmac_max_age_s:g} s is accepted (are the clocks in sync?)"
                )
        expected = sign(s.hmac_secret.get_secret_value(), body, timestamp)
        if not hmac.compare_digest(signature.strip().lower().encode(), expected.encode()):
            raise InvalidSignature(
                f"the {header} signature does not match the body (HMAC-SHA256 over "
                f"{'timestamp:body' if timestamp is not None else 'the body'}); check the secret"
            )
        return self.signature_grants

    # ---- the one decision -------------------------------------------------------------------

    def require(self, grant: Grant, scope: Scope) -> None:
        """Raise Unauthorized (nothing usable sent) or Forbidden (wrong credentials)."""
        if scope in grant.scope_set:
            return
        challenge = self._challenges.get(scope)
        if challenge is None:  # signed, hub: nothing a header could add
            raise Forbidden(f"these credentials do not give {scope!s}")
        if grant.scheme not in challenge.schemes:
            raise Unauthorized(
                challenge.missing, headers={"WWW-Authenticate": challenge.www_authenticate}
            )
        raise Forbidden(challenge.wrong)

    def needs_signature(self, grant: Grant, source: str) -> bool:
        """Grafana's webhook with `webhook_hmac_secret` set, unless the hub vouches for it."""
        return (
            source == "grafana"
            and self.webhook.hmac_secret is not None
            and Scope.HUB not in grant.scope_set
        )


def _raw(secret: SecretStr) -> bytes:
    return secret.get_secret_value().encode()


def sign(secret: str, body: bytes, timestamp: str | None = None) -> str:
    """Grafana's signature: lowercase hex HMAC-SHA256 over `timestamp:body`, or the body."""
    message = body if timestamp is None else timestamp.encode() + b":" + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


# ---- the app's side ---------------------------------------------------------------------------


def install_auth(
    app: FastAPI,
    settings: AppSettings | None,
    *,
    hub_vouches: bool,
    tenants: TenantTokens | None = None,
) -> None:
    """Add the middleware (none without settings: an app built only to describe its routes)."""
    if settings is None:
        return
    backend = Authenticator(
        settings.server, settings.webhook, hub_vouches=hub_vouches, tenants=tenants
    )
    app.state.authenticator = backend
    app.add_middleware(AuthenticationMiddleware, backend=backend)


def _authenticator(request: Request) -> Authenticator:
    return request.app.state.authenticator


def authorize(request: Request, scope: Scope) -> None:
    _authenticator(request).require(request.auth, scope)


def reach(request: Request, scope: Scope) -> Reach:
    """Where the request's `scope` applies: every namespace in an app without authentication
    (one built only to describe its routes)."""
    grant = request.scope.get("auth")
    return grant.reach(scope) if isinstance(grant, Grant) else EVERYWHERE


# Documents `Authorization: Bearer` in the OpenAPI document; the middleware does the reading.
_bearer_doc = HTTPBearer(auto_error=False, description="PROFILER_API_TOKEN or PROFILER_HUB_TOKEN")


def requires(scope: Scope) -> params.Depends:
    """A route's dependency: the request's grant must hold `scope`."""
    if scope in (Scope.CAPTURE, Scope.REGISTER):

        async def check(
            request: Request, _: Annotated[object, Depends(_bearer_doc)] = None
        ) -> None:
            authorize(request, scope)

    else:

        async def check(request: Request) -> None:  # async: no worker-thread hop
            authorize(request, scope)

    check.scope = scope  # type: ignore[attr-defined]  # for the route table (tests, docs)
    return Depends(check)


def webhook_needs_signature(request: Request, source: str) -> bool:
    """Check a webhook's header credentials before its body is read (401/403 first, as always);
    say whether the body must carry a Grafana signature. Where the signature stands in for the
    API token, the header check waits for it."""
    auth = _authenticator(request)
    signing = auth.needs_signature(request.auth, source)
    if not (signing and Scope.WEBHOOK in auth.signature_grants):
        auth.require(request.auth, Scope.WEBHOOK)
    return signing


def check_signature(request: Request, body: bytes, now_s: float | None = None) -> None:
    """Verify the body's signature; its scopes join the request's grant."""
    auth = _authenticator(request)
    grant: Grant = request.auth
    grant.add(auth.signature(request.headers, body, time.time() if now_s is None else now_s))
    auth.require(grant, Scope.WEBHOOK)
