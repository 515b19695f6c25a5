"""Tenants: tokens that read or capture only some namespaces, and the snapshot reads held to them.

A permission is an action and where it applies (Grafana's RBAC: `action` + `scope`); here the
actions are the scopes of api/auth.py (`read`, `capture`) and where is a list of namespaces, or
`*` for all of them. The tokens live in one JSON file (`PROFILER_TOKENS_FILE`, a Kubernetes Secret
mounted as a file), re-read when it changes, without a restart:

    {"tokens": [
      {"name": "team-a", "sha256": "<hex of the token's SHA-256>", "read": ["team-a"],
       "capture": ["team-a"]},
      {"name": "platform", "token": "<the token itself>", "read": ["*"], "capture": ["*"]}
    ]}

A token is stored as its SHA-256 (`sha256`) or as itself (`token`): tokens are long random
strings, so an unsalted fast hash is enough (a slow one such as bcrypt suits low-entropy
passwords and would cost every request ~100 ms).

Another tenant's snapshot must look exactly like one that does not exist (404
`snapshot_not_found`, the same sentence), so no answer tells that it exists: api/tenants.py
holds the snapshot reads to a `Reach`, below every route that reads snapshots.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import BaseModel, Field, StringConstraints, model_validator

__all__ = [
    "EVERYWHERE",
    "NOWHERE",
    "Reach",
    "TenantToken",
    "TenantTokens",
    "TokenFile",
    "load_token_file",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

EVERY_NAMESPACE = "*"
RELOAD_CHECK_S = 1.0  # how often the file's identity is looked at (a stat), at most

Namespace = Annotated[str, StringConstraints(pattern=r"^(\*|[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)$")]


@dataclass(frozen=True)
class Reach:
    """Where an action applies: some namespaces, or every one (`namespaces` None)."""

    namespaces: frozenset[str] | None = None

    @property
    def everywhere(self) -> bool:
        return self.namespaces is None

    @property
    def nowhere(self) -> bool:
        return self.namespaces is not None and not self.namespaces

    def allows(self, namespace: str | None) -> bool:
        """A snapshot or sidecar without a namespace is only for those who reach everywhere."""
        return self.namespaces is None or (namespace is not None and namespace in self.namespaces)

    def keep(self, items: Iterable[T], namespace_of: Callable[[T], str | None]) -> list[T]:
        """The items whose namespace (`namespace_of(item)`) this reach allows."""
        return [i for i in items if self.allows(namespace_of(i))]

    @classmethod
    def of(cls, names: Iterable[str]) -> Reach:
        names = frozenset(names)
        return EVERYWHERE if EVERY_NAMESPACE in names else cls(names)


EVERYWHERE = Reach()
NOWHERE = Reach(frozenset())


class TenantToken(BaseModel):
    """One token of the file: who it is, its secret (or the secret's SHA-256), where it may
    read and where it may capture."""

    model_config = {"extra": "forbid"}

    name: str = Field(min_length=1, max_length=128)
    token: str | None = Field(default=None, min_length=16, repr=False)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$", repr=False)
    read: list[Namespace] = Field(default_factory=list)
    capture: list[Namespace] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_secret(self) -> TenantToken:
        if (self.token is None) == (self.sha256 is None):
            raise ValueError(f"token {self.name!r}: give exactly one of 'token' and 'sha256'")
        if not self.read and not self.capture:
            raise ValueError(f"token {self.name!r} may neither read nor capture anywhere")
        return self

    @property
    def digest(self) -> bytes:
        if self.sha256 is not None:
            return bytes.fromhex(self.sha256)
        return hashlib.sha256(self.token.encode()).digest()  # type: ignore[union-attr]


class TokenFile(BaseModel):
    model_config = {"extra": "forbid"}

    tokens: list[TenantToken]

    @model_validator(mode="after")
    def _unique(self) -> TokenFile:
        names = [t.name for t in self.tokens]
        digests = [t.digest for t in self.tokens]
        if len(set(names)) != len(names) or len(set(digests)) != len(digests):
            raise ValueError("every token needs its own name and its own secret")
        return self


def load_token_file(path: Path) -> TokenFile:
    """The file, validated; ValueError naming the file and what is wrong (never a secret)."""
    try:
        return TokenFile.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ValueError(f"tokens file {path}: {_no_input(exc)}") from None


def _no_input(exc: Exception) -> str:
    """Pydantic's message without the input values (they may hold a token)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}" for e in errors()
        )
    return str(exc)


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    name: str
    read: Reach
    capture: Reach


class TenantTokens:
    """The file's tokens, re-read when the file changes: its identity (inode, size, mtime) is
    looked at no more than once a second, on a request. Kubernetes updates a mounted Secret by
    swapping a symlink, which changes the inode. A file that turns unreadable or invalid keeps
    the last good tokens in force, with an error in the log, until it is fixed."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._identity: tuple[int, int, int] | None = None
        self.reloads_total = 0
        self._entries = self._load()  # a bad file at start-up fails the start
        self._checked_s = clock()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self) -> list[_Entry]:
        identity = self._stat()
        loaded = load_token_file(self.path)
        self._identity = identity
        return [
            _Entry(t.digest, t.name, Reach.of(t.read) if t.read else NOWHERE,
                   Reach.of(t.capture) if t.capture else NOWHERE)
            for t in loaded.tokens
        ]  # fmt: skip

    def entries(self) -> list[_Entry]:
        now = self._clock()
        if now - self._checked_s < RELOAD_CHECK_S:
            return self._entries
        with self._lock:
            if now - self._checked_s < RELOAD_CHECK_S:
                return self._entries
            self._checked_s = now
            identity = self._stat()
            if identity is not None and identity != self._identity:
                try:
                    self._entries = self._load()
                    self.reloads_total += 1
                    log.info("tokens file %s reloaded: %d tokens", self.path, len(self._entries))
                except ValueError as exc:
                    self._identity = identity  # logged once per bad version of the file
                    log.error("%s; the previous tokens stay in force", exc)
        return self._entries

    def match(self, token: bytes) -> _Entry | None:
        """The entry of a presented token: every digest is compared, in constant time."""
        digest = hashlib.sha256(token).digest()
        found = None
        for entry in self.entries():
            if hmac.compare_digest(digest, entry.digest) and found is None:
                found = entry
        return found
