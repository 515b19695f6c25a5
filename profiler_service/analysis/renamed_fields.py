"""Proportions are shares (`_share`, 0-1); a percentage is for display only. Fields that once held
a percentage (`_pct`, 0-100) were renamed: `ReadsOldPercentages` reads the old spelling too, so a
snapshot written before (on disk, in a bucket, in an index's documents) loads with its shares.

A model lists its renames in `old_percentages` (old name -> new name); every model that does is
recorded in `RENAMED`, which the HTTP API reference lists with the version that renamed it. A
finding's evidence is a plain mapping in the snapshot: `Finding` renames its old keys through
`EVIDENCE_RENAMES`, which the rule registry fills from each rule's evidence model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, model_validator

# The release whose snapshots write the new names (docs/reference/http-api.md says so).
SINCE = "0.2.0"


@dataclass(frozen=True)
class Renamed:
    model: str
    old: str
    new: str
    since: str


RENAMED: list[Renamed] = []
# rule -> its evidence model's renames (findings/registry.py fills it as the rules register).
EVIDENCE_RENAMES: dict[str, dict[str, str]] = {}


def percent_to_share(value: Any) -> Any:
    """A percentage (0-100) as a share (0-1): a number, or each value of a list or a mapping."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return round(value / 100, 6)
    if isinstance(value, list):
        return [percent_to_share(v) for v in value]
    if isinstance(value, Mapping):
        return {k: percent_to_share(v) for k, v in value.items()}
    return value


def percent(share: float) -> float:
    """A share as the percentage a report shows (rounded off the float's noise only)."""
    return round(100 * share, 4)


def read_old_percentages(data: Mapping[str, Any], renames: Mapping[str, str]) -> Any:
    """`data` with each old field of `renames` moved to its new name as a share; the new name
    wins where both are there. `data` itself where it holds none."""
    if not any(old in data for old in renames):
        return data
    moved = dict(data)
    for old, new in renames.items():
        if old in moved:
            value = moved.pop(old)
            moved.setdefault(new, percent_to_share(value))
    return moved


def share_of(data: Mapping[str, Any], new: str, old: str) -> Any:
    """A share from raw JSON that may be in either spelling: `new`, else `old` / 100."""
    if data.get(new) is not None:
        return data[new]
    return percent_to_share(data.get(old))


class ReadsOldPercentages(BaseModel):
    """A model with fields renamed from a percentage to a share: the old names are read too."""

    old_percentages: ClassVar[dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for old, new in cls.__dict__.get("old_percentages", {}).items():
            RENAMED.append(Renamed(cls.__name__, old, new, SINCE))

    @model_validator(mode="before")
    @classmethod
    def _read_old_percentages(cls, data: Any) -> Any:
        return (
            read_old_percentages(data, cls.old_percentages) if isinstance(data, Mapping) else data
        )
