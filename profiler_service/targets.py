"""What the service may capture: targets by name, their workers or how to discover them, and the
rules that map an alert to one. Requests name a target; they never carry an address."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, Field, field_validator, model_validator

TARGET_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
_GRPC_URL = re.compile(
    r"^(?:grpc://)?(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(?P<port>\d{1,5})$"
)
# The cluster roles whose tasks are captured by default: those that train. Parameter servers and
# the evaluator run profiler servers too; name them with ?tasks= to capture them.
TRAINING_TASKS = ("chief", "master", "worker")


class TargetKind(StrEnum):
    GRPC = "grpc"  # a job's profiler server, captured from outside (sidecar)
    IN_PROCESS = "in-process"  # this very process (the embedded agent)


def profiler_address(text: str) -> str:
    """`grpc://HOST:PORT` or `HOST:PORT` as `HOST:PORT`, the form XProf's capture client takes."""
    match = _GRPC_URL.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a profiler server address (grpc://HOST:PORT)")
    if not 0 < int(match["port"]) < 65536:
        raise ValueError(f"{text!r} has a port outside 1-65535")
    return f"{match['host']}:{match['port']}"


class Discovery(BaseModel):
    """Where a target's workers are found at each capture, so a rescheduled job is followed.

    `tf-config://` reads the service's own TF_CONFIG; `tf-config:///PATH` a file holding one
    (re-read every time); `dns://NAME:PORT` every address NAME resolves to (a headless Service).
    """

    source: str = Field(pattern="^(tf-config|dns)$")
    path: str | None = None  # tf-config: a file; None means the TF_CONFIG variable
    host: str | None = None  # dns
    port: int | None = Field(default=None, gt=0, lt=65536)  # dns; tf-config: replaces each port
    tasks: list[str] = Field(default_factory=lambda: list(TRAINING_TASKS))  # tf-config

    @classmethod
    def parse(cls, url: str) -> Discovery:
        parts = urlsplit(url.strip())
        query = parse_qs(parts.query)
        unknown = set(query) - {"tasks", "port"}
        if unknown:
            raise ValueError(f"{url!r}: unknown option(s) {', '.join(sorted(unknown))}")
        port = query.get("port", [None])[-1]
        if parts.scheme == "dns":
            if not parts.hostname or parts.port is None or query:
                raise ValueError(f"{url!r} must be dns://NAME:PORT")
            return cls(source="dns", host=parts.hostname, port=parts.port)
        if parts.scheme != "tf-config" or parts.netloc:
            raise ValueError(
                f"{url!r} is not a discovery URL (tf-config://, tf-config:///PATH, dns://NAME:PORT)"
            )
        tasks = [t for v in query.get("tasks", []) for t in v.split(",") if t]
        return cls(
            source="tf-config",
            path=parts.path or None,
            port=int(port) if port is not None and port.isdigit() else port,
            **({"tasks": tasks} if tasks else {}),
        )

    def describe(self) -> str:
        if self.source == "dns":
            return f"dns://{self.host}:{self.port}"
        where = f"TF_CONFIG in {self.path}" if self.path else "the TF_CONFIG variable"
        return where + (f" (port {self.port})" if self.port else "")


class Target(BaseModel):
    """A job the service may capture. Requests name a target; they never carry an address."""

    name: str = Field(pattern=TARGET_NAME_PATTERN)
    kind: TargetKind = TargetKind.GRPC
    # host:port of each worker's profiler server; the first is the one the client talks to.
    workers: list[str] = Field(default_factory=list)
    # Instead of a fixed list: where the workers are found when a capture starts.
    discover: Discovery | None = None

    @field_validator("discover", mode="before")
    @classmethod
    def _parse_discovery(cls, value: Any) -> Any:
        return Discovery.parse(value) if isinstance(value, str) else value

    @field_validator("workers", mode="before")
    @classmethod
    def _normalise_workers(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            value = [value]
        return [profiler_address(str(item)) for item in value or []]

    @model_validator(mode="after")
    def _workers_match_kind(self) -> Target:
        if self.kind is TargetKind.GRPC and not self.workers and self.discover is None:
            raise ValueError(
                f"target {self.name!r} needs grpc://HOST:PORT, tf-config:// or dns://NAME:PORT"
            )
        if self.workers and self.discover is not None:
            raise ValueError(f"target {self.name!r}: give its workers or a discovery, not both")
        if self.kind is TargetKind.IN_PROCESS and (self.workers or self.discover):
            raise ValueError(f"in-process target {self.name!r} takes no address")
        return self

    @property
    def service_addr(self) -> str:
        return self.workers[0] if self.workers else "in-process"

    @classmethod
    def parse(cls, spec: str, default_name: str = "default") -> Target:
        """Parse `[NAME=]grpc://HOST:PORT[,grpc://HOST:PORT...]`, `[NAME=]tf-config://[PATH]` or
        `[NAME=]dns://NAME:PORT` (the CLI and env form)."""
        name, sep, rest = spec.partition("=")
        if not sep or "://" in name:
            name, rest = default_name, spec
        rest = rest.strip()
        if rest.startswith(("tf-config:", "dns:")):
            return cls(name=name.strip(), discover=rest)
        return cls(name=name.strip(), workers=[w for w in rest.split(",") if w.strip()])


class TargetRule(BaseModel):
    """Alert -> target: an alert whose `label` fully matches `pattern` (a regex) -> `target`."""

    label: str = Field(min_length=1)
    pattern: str
    target: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"pattern {value!r} is not a regular expression: {exc}") from exc
        return value


class TargetMatcher:
    """Which target an alert is about: the rules first (`label` fully matching a regex names a
    target), then the listed labels whose value is a known target's name, then the default.

    The sidecar knows its configured targets; the fleet hub the ones its sidecars registered.
    """

    def __init__(self, rules: Iterable[TargetRule], labels: Iterable[str], default: str | None):
        self.rules = [(r, re.compile(r.pattern)) for r in rules]
        self.labels = list(labels)
        self.default = default

    def match(self, labels: dict[str, str], known: Collection[str]) -> tuple[str | None, str]:
        """The target and a sentence: how it matched, or what was tried."""
        for rule, pattern in self.rules:
            value = labels.get(rule.label)
            if value is not None and pattern.fullmatch(value):
                return rule.target, f"label {rule.label}={value!r} matches {rule.pattern!r}"
        for label in self.labels:
            value = labels.get(label)
            if value is not None and value in known:
                return value, f"label {label}={value!r} names a configured target"
        if self.default:
            return self.default, "the default webhook target"
        return None, self.no_match(labels, known)

    def no_match(self, labels: dict[str, str], known: Collection[str]) -> str:
        names = {r.label for r, _ in self.rules} | set(self.labels)
        tried = ", ".join(f"{k}={labels[k]!r}" for k in sorted(names) if k in labels)
        configured = ", ".join(list(known)[:20]) or "none"  # in the order configured
        if len(known) > 20:
            configured += f", ... ({len(known)} in all)"
        rules = ", ".join(f"{r.label}~{r.pattern}->{r.target}" for r, _ in self.rules) or "none"
        return (
            f"no configured target matches this alert (labels tried: {tried or 'none present'}; "
            f"targets: {configured}; rules: {rules}; labels read: "
            f"{', '.join(self.labels) or 'none'})"
        )


def in_process_target(name: str = "local") -> Target:
    return Target(name=name, kind=TargetKind.IN_PROCESS)
