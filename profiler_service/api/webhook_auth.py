"""Who may post alerts: bearer or basic credentials, and Grafana's HMAC-signed bodies.

Alertmanager can send basic, bearer (or OAuth2/TLS) credentials but cannot sign; Grafana's webhook
contact point can send basic or bearer credentials and can also sign: HMAC-SHA256 in lowercase
hex over the body, or over `timestamp + ":" + body` when a timestamp header is configured (the
timestamp is Unix seconds). Every comparison is constant-time.

Which credentials a webhook needs:
- `webhook_token` and/or `webhook_username` + `webhook_password` set: one of them;
- neither set: `Bearer <api_token>` when an API token is set, except on a Grafana webhook with
  signing configured, where the signature is the credential;
- on `/webhooks/grafana`, with `webhook_hmac_secret` set: a valid signature as well;
- wherever a token is accepted, `Bearer <hub_token>` too (the fleet hub forwarding an alert);
  from the hub, a Grafana alert needs no signature (the hub checked it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping

from profiler_service.config import Settings
from profiler_service.errors import Forbidden, InvalidSignature, Unauthorized

__all__ = ["check_authorization", "is_hub", "sign", "verify_signature"]

_REALM = 'Basic realm="profiler-service webhooks"'


def check_authorization(
    settings: Settings, authorization: str | None, *, signing_required: bool
) -> None:
    """Raise Unauthorized (nothing usable sent) or Forbidden (wrong credentials)."""
    tokens = [settings.webhook_token] if settings.webhook_token else []
    basic = settings.webhook_username is not None and settings.webhook_password is not None
    if not tokens and not basic and settings.api_token is not None and not signing_required:
        tokens = [settings.api_token]
    if not tokens and not basic:
        return
    if settings.hub_token is not None:  # the fleet hub forwarding an alert (hub/routing.py)
        tokens.append(settings.hub_token)
    challenges = ", ".join(([] if not tokens else ["Bearer"]) + ([_REALM] if basic else []))
    scheme, _, value = (authorization or "").strip().partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme not in {"bearer", "basic"} or not value:
        raise Unauthorized(
            "webhooks need an Authorization header: "
            + " or ".join((["Bearer <token>"] if tokens else []) + (["Basic"] if basic else [])),
            headers={"WWW-Authenticate": challenges},
        )
    if scheme == "bearer" and tokens:
        given = value.encode()
        # Compare against every accepted token, so the time taken says nothing about which.
        if any([hmac.compare_digest(given, t.get_secret_value().encode()) for t in tokens]):
            return
    elif scheme == "basic" and basic:
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user, password = "", ""
        user_ok = hmac.compare_digest(user.encode(), settings.webhook_username.encode())
        password_ok = hmac.compare_digest(
            password.encode(), settings.webhook_password.get_secret_value().encode()
        )
        if user_ok and password_ok:
            return
    raise Forbidden("the webhook credentials are not valid for this service")


def is_hub(settings: Settings, authorization: str | None) -> bool:
    """`Bearer <hub_token>`: the fleet hub forwarding alerts it has already authenticated (and,
    from Grafana, whose signature it has checked: its re-sent body carries none)."""
    if settings.hub_token is None:
        return False
    scheme, _, value = (authorization or "").strip().partition(" ")
    expected = settings.hub_token.get_secret_value().encode()
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), expected)


def sign(secret: str, body: bytes, timestamp: str | None = None) -> str:
    """Grafana's signature: lowercase hex HMAC-SHA256 over `timestamp:body`, or the body."""
    message = body if timestamp is None else timestamp.encode() + b":" + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_signature(
    settings: Settings, headers: Mapping[str, str], body: bytes, now_s: float
) -> None:
    """Raise InvalidSignature unless the body carries a valid, fresh signature."""
    if settings.webhook_hmac_secret is None:
        return
    header = settings.webhook_hmac_header
    signature = headers.get(header)
    if not signature:
        raise InvalidSignature(f"this webhook must be signed: the {header} header is missing")
    timestamp = None
    if settings.webhook_hmac_timestamp_header:
        ts_header = settings.webhook_hmac_timestamp_header
        timestamp = (headers.get(ts_header) or "").strip()
        if not timestamp.isdigit():
            raise InvalidSignature(
                f"this webhook must carry its signing time: the {ts_header} header is "
                f"{'missing' if not timestamp else 'not Unix seconds'}"
            )
        age_s = now_s - int(timestamp)
        if abs(age_s) > settings.webhook_hmac_max_age_s:
            raise InvalidSignature(
                f"the signature's timestamp is {abs(age_s):.0f} s "
                f"{'old' if age_s > 0 else 'in the future'}; at most "
                f"{settings.webhook_hmac_max_age_s:g} s is accepted (are the clocks in sync?)"
            )
    expected = sign(settings.webhook_hmac_secret.get_secret_value(), body, timestamp)
    if not hmac.compare_digest(signature.strip().lower().encode(), expected.encode()):
        raise InvalidSignature(
            f"the {header} signature does not match the body (HMAC-SHA256 over "
            f"{'timestamp:body' if timestamp is not None else 'the body'}); check the secret"
        )
