"""Service settings: one class, `PROFILER_` environment variables, CLI flags override them."""

from __future__ import annotations

import ipaddress
import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

TARGET_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
_GRPC_URL = re.compile(
    r"^(?:grpc://)?(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(?P<port>\d{1,5})$"
)


class TargetKind(StrEnum):
    GRPC = "grpc"  # a job's profiler server, captured from outside (sidecar)
    IN_PROCESS = "in-process"  # this very process (the embedded agent)


class Target(BaseModel):
    """A job the service may capture. Requests name a target; they never carry an address."""

    name: str = Field(pattern=TARGET_NAME_PATTERN)
    kind: TargetKind = TargetKind.GRPC
    # host:port of each worker's profiler server; the first is the one the client talks to.
    workers: list[str] = Field(default_factory=list)

    @field_validator("workers", mode="before")
    @classmethod
    def _normalise_workers(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            value = [value]
        out = []
        for item in value or []:
            match = _GRPC_URL.match(str(item).strip())
            if not match:
                raise ValueError(f"{item!r} is not a profiler server address (grpc://HOST:PORT)")
            if not 0 < int(match["port"]) < 65536:
                raise ValueError(f"{item!r} has a port outside 1-65535")
            out.append(f"{match['host']}:{match['port']}")
        return out

    @model_validator(mode="after")
    def _workers_match_kind(self) -> Target:
        if self.kind is TargetKind.GRPC and not self.workers:
            raise ValueError(f"target {self.name!r} needs at least one grpc://HOST:PORT")
        if self.kind is TargetKind.IN_PROCESS and self.workers:
            raise ValueError(f"in-process target {self.name!r} takes no address")
        return self

    @property
    def service_addr(self) -> str:
        return self.workers[0] if self.workers else "in-process"

    @classmethod
    def parse(cls, spec: str, default_name: str = "default") -> Target:
        """Parse `[NAME=]grpc://HOST:PORT[,grpc://HOST:PORT...]` (the CLI and env form)."""
        name, sep, rest = spec.partition("=")
        if not sep:
            name, rest = default_name, spec
        return cls(name=name.strip(), workers=[w for w in rest.split(",") if w.strip()])


def in_process_target(name: str = "local") -> Target:
    return Target(name=name, kind=TargetKind.IN_PROCESS)


class Settings(BaseSettings):
    """Every setting has a safe default; README lists each one."""

    model_config = SettingsConfigDict(env_prefix="PROFILER_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    insecure: bool = False  # allow a non-loopback bind without an API token
    api_token: SecretStr | None = None

    store: Path = Path("./profiles")
    targets: Annotated[list[Target], NoDecode] = Field(default_factory=list)

    duration_default_s: float = Field(default=5.0, gt=0)
    duration_min_s: float = Field(default=0.1, gt=0)
    # TF traces beyond ~10 s can exhaust memory (tensorflow#61526): raise with care.
    duration_max_s: float = Field(default=60.0, gt=0)
    capture_grace_s: float = Field(default=30.0, gt=0)
    capture_attempts: int = Field(default=2, ge=1, le=10)
    analysis_timeout_s: float = Field(default=300.0, gt=0)

    host_tracer_level: int = Field(default=2, ge=0, le=3)
    python_tracer_level: int = Field(default=0, ge=0, le=1)
    device_tracer_level: int = Field(default=1, ge=0, le=1)
    include_dataset_ops: bool = True

    retention_max_count: int = Field(default=200, ge=1)
    retention_max_bytes: int = Field(default=20 * 1024**3, ge=1)

    # Where TensorBoard/XProf serves this store, for deep links (e.g. http://xprof:8791).
    tensorboard_url: str | None = None
    tensorboard_flavour: str = Field(default="xprof", pattern="^(xprof|tensorboard)$")

    @field_validator("targets", mode="before")
    @classmethod
    def _parse_targets(cls, value: Any) -> Any:
        """Accept a JSON list, or specs separated by spaces/semicolons (`a=grpc://h:1 b=grpc://h:2`)."""
        if isinstance(value, str):
            text = value.strip()
            if not text:
                return []
            if text.startswith("["):
                value = json.loads(text)
            else:
                value = [s for s in re.split(r"[;\s]+", text) if s]
        items = []
        for i, item in enumerate(value or []):
            if isinstance(item, str):
                item = Target.parse(item, default_name="default" if i == 0 else f"target-{i}")
            items.append(item)
        return items

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if not self.duration_min_s <= self.duration_default_s <= self.duration_max_s:
            raise ValueError(
                f"duration_default_s={self.duration_default_s} must lie within "
                f"[{self.duration_min_s}, {self.duration_max_s}]"
            )
        names = [t.name for t in self.targets]
        if len(names) != len(set(names)):
            raise ValueError(f"target names must be unique, got {names}")
        return self

    def target(self, name: str | None) -> Target | None:
        """The named target, or the only/first one when no name is given."""
        if name is None:
            return self.targets[0] if self.targets else None
        return next((t for t in self.targets if t.name == name), None)

    @property
    def binds_loopback(self) -> bool:
        if self.host in ("localhost", ""):
            return self.host == "localhost"
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check_bind_is_safe(self) -> None:
        """Refuse to expose the API beyond loopback without a token, unless told to."""
        if not self.binds_loopback and self.api_token is None and not self.insecure:
            raise ValueError(
                f"refusing to listen on {self.host} without PROFILER_API_TOKEN; "
                "set a token, bind 127.0.0.1, or pass --insecure"
            )
