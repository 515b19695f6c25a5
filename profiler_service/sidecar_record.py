"""What a sidecar says of itself to the fleet hub: the record both sides read.

The sidecar sends it (`registration.py`: `PUT {hub}/sidecars/{name}`, or the same record in the
shared bucket at `URL/sidecars/<namespace>.<name>.json`); the hub keeps it (`hub/registry.py`)
and dials only the addresses it holds. Neither side imports the other for it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from profiler_service.targets import TARGET_NAME_PATTERN

__all__ = ["RECORDS_PREFIX", "SIDECAR_NAME_PATTERN", "SidecarRecord", "record_path"]

SIDECAR_NAME_PATTERN = r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"  # a pod name (DNS subdomain)

RECORDS_PREFIX = "sidecars"  # the records' folder in the shared bucket


class SidecarRecord(BaseModel):
    """What a sidecar says of itself; `last_seen` and `via` are the hub's."""

    name: str = Field(pattern=SIDECAR_NAME_PATTERN)
    namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    pod: str | None = None
    workload: str | None = None  # the job it profiles (PROFILER_WORKLOAD), as the ledger names it
    targets: list[Annotated[str, Field(pattern=TARGET_NAME_PATTERN)]] = Field(default_factory=list)
    url: str = Field(pattern=r"^https?://[^\s/?#]+/?$")  # where the hub dials it
    public_url: str | None = None
    version: str | None = None
    heartbeat_s: float = Field(default=15.0, gt=0)
    last_seen: datetime | None = None
    via: str = "hub"  # hub (PUT /sidecars), bucket (a registration record) or peer (a replica)

    @property
    def key(self) -> str:
        return f"{self.namespace or ''}/{self.name}"

    def captures(self, target: str) -> bool:
        return target in self.targets


def record_path(record: SidecarRecord) -> str:
    """Where a sidecar's record lies in the shared bucket."""
    return f"{RECORDS_PREFIX}/{record.namespace or '_'}.{record.name}.json"
