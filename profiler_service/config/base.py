"""What every settings group shares: the `PROFILER_` environment, and how a root composes them.

A group reads its own fields from the environment (`PROFILER_<FIELD>`, the field's name kept
whole, so every variable is named as before), so a component and its test build only the group
they use. A root (`Settings`, `HubSettings`) is a plain model of groups: it takes the flat names
(`Settings(store=..., duration_max_s=10)`, the CLI's flags, the agent's keyword arguments), hands
each to the group that declares it, and checks what spans groups.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationInfo
from pydantic_settings import BaseSettings, SettingsConfigDict


class Group(BaseSettings):
    """One stage's settings, read from `PROFILER_*` variables; keyword arguments win."""

    model_config = SettingsConfigDict(env_prefix="PROFILER_", extra="ignore")


def check_url(value: str | None, info: ValidationInfo) -> str | None:
    """A URL with a scheme (`gs://bucket/prefix`), stripped of spaces and a trailing slash."""
    if value is not None and not re.match(r"^[a-z][a-z0-9+.-]*://.", value.strip()):
        raise ValueError(f"{info.field_name} {value!r} must be a URL such as gs://bucket/prefix")
    return value.strip().rstrip("/") if value else None


class Root(BaseModel):
    """Groups by name; built from flat setting names, each routed to the group declaring it."""

    #: the groups' field names, each declared by exactly one group (checked at class creation)
    owners: ClassVar[dict[str, str]] = {}
    #: every root's setting names: a name no root knows is a typo (a name of another root, a
    #: sidecar's given to the hub, is ignored: one environment may serve both)
    known_everywhere: ClassVar[set[str]] = set()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.owners = {}
        for group, group_cls in cls.groups().items():
            for name in group_cls.model_fields:
                if name in cls.owners or name in cls.model_fields:
                    raise TypeError(f"{cls.__name__}: {name} is declared twice ({group})")
                cls.owners[name] = group
        Root.known_everywhere |= set(cls.owners) | set(cls.model_fields)

    def __init__(self, **values: Any) -> None:
        super().__init__(**self.compose(values))

    @classmethod
    def groups(cls) -> dict[str, type[Group]]:
        """{attribute: group class}, in declaration order (the configuration page's order)."""
        return {name: field.annotation for name, field in cls.model_fields.items()}  # type: ignore[misc]

    @classmethod
    def compose(cls, values: dict[str, Any]) -> dict[str, Group]:
        """Each group built from the environment and the flat names it declares; a group may
        also be given whole (`capture=CaptureSettings(...)`). A name no root declares is
        refused with the nearest valid one (`agent.start(duration_max=10)` would otherwise
        drop the bound silently); unknown `PROFILER_*` variables are still ignored."""
        typos = sorted(set(values) - Root.known_everywhere - set(cls.model_fields))
        if typos:
            raise ValueError("; ".join(_unknown(name) for name in typos))
        composed: dict[str, Group] = {}
        for group, group_cls in cls.groups().items():
            given = values.get(group)
            mine = {k: v for k, v in values.items() if cls.owners.get(k) == group}
            if isinstance(given, group_cls) and not mine:
                composed[group] = given
                continue
            if isinstance(given, BaseModel):
                given = given.model_dump(exclude_unset=True)
            composed[group] = group_cls(**(given or {}), **mine)
        return composed

    @classmethod
    def fields(cls) -> dict[str, Any]:
        """Every setting's `FieldInfo` by its flat name (the CLI's flags, the docs, the chart)."""
        return {
            name: field
            for group_cls in cls.groups().values()
            for name, field in group_cls.model_fields.items()
        }


def _unknown(name: str) -> str:
    nearest = difflib.get_close_matches(name, sorted(Root.known_everywhere), n=1, cutoff=0.6)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
    return f"unknown setting {name!r}{hint}"
