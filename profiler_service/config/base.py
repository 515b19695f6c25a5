"""What every settings group shares: the `PROFILER_` environment, and how a root composes them.

Every setting has an outward name, flat and unique over the groups (`memory_watch_share`): its
variable (`PROFILER_MEMORY_WATCH_SHARE`), its flag, its keyword, its name in the docs and the
chart. A group's fields leave out the prefix its names share (`WatchSettings.prefix` is
`memory_watch_`, so the setting is read as `settings.watch.share`); a field whose outward name is
not the prefix plus its own names it (`enabled: bool = Field(validation_alias="memory_watch")`).
A group is built from the environment and from keywords by outward name, so a component and its
test build only the group they use (`WatchSettings(memory_watch_share=0.8)`). A root
(`Settings`, `HubSettings`) is a plain model of groups: it takes the outward names
(`Settings(store=..., duration_max_s=10)`, the CLI's flags, the agent's keyword arguments), hands
each to the group that declares it, and checks what spans groups.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationInfo
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict


class Group(BaseSettings):
    """One stage's settings, read from `PROFILER_<OUTWARD NAME>` variables; keyword arguments
    (by outward name) win."""

    #: what the outward names of this group's fields begin with, left out of the fields' names
    prefix: ClassVar[str] = ""

    # Each field's validation alias is its outward name (set below where the field gives none);
    # the env prefix then applies to the alias alone, so a field is read from PROFILER_<ALIAS>
    # and from no variable named after the field itself.
    model_config = SettingsConfigDict(
        env_prefix="PROFILER_", env_prefix_target="alias", extra="ignore"
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        unnamed = [f for f in cls.model_fields.values() if f.validation_alias is None]
        for name, field in cls.model_fields.items():
            if field.validation_alias is None:
                field.validation_alias = cls.prefix + name
        if unnamed:
            cls.model_rebuild(force=True)

    def __init__(self, **values: Any) -> None:
        inward = sorted(set(values) & set(type(self).model_fields) - set(type(self).outward()))
        if inward:
            names = {field: outward for outward, field in type(self).outward().items()}
            raise ValueError(
                f"{type(self).__name__} takes settings by outward name: "
                + ", ".join(f"{names[n]!r}, not {n!r}" for n in inward)
            )
        super().__init__(**values)

    @classmethod
    def outward(cls) -> dict[str, str]:
        """{outward name: field name}, in declaration order."""
        return {str(f.validation_alias): name for name, f in cls.model_fields.items()}

    @classmethod
    def fields(cls) -> dict[str, FieldInfo]:
        """Each field's `FieldInfo` by its outward name."""
        return {outward: cls.model_fields[name] for outward, name in cls.outward().items()}


def check_url(value: str | None, info: ValidationInfo) -> str | None:
    """A URL with a scheme (`gs://bucket/prefix`), stripped of spaces and a trailing slash."""
    if value is not None and not re.match(r"^[a-z][a-z0-9+.-]*://.", value.strip()):
        raise ValueError(f"{info.field_name} {value!r} must be a URL such as gs://bucket/prefix")
    return value.strip().rstrip("/") if value else None


class Root(BaseModel):
    """Groups by name; built from flat setting names, each routed to the group declaring it."""

    #: {outward name: (group, field)}, each name declared by exactly one group (checked at
    #: class creation)
    owners: ClassVar[dict[str, tuple[str, str]]] = {}
    #: every root's setting names: a name no root knows is a typo (a name of another root, a
    #: sidecar's given to the hub, is ignored: one environment may serve both)
    known_everywhere: ClassVar[set[str]] = set()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.owners = {}
        for group, group_cls in cls.groups().items():
            for name, field in group_cls.outward().items():
                if name in cls.owners or name in cls.model_fields:
                    raise TypeError(f"{cls.__name__}: {name} is declared twice ({group})")
                cls.owners[name] = (group, field)
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
            mine = {k: v for k, v in values.items() if cls.owners.get(k, ("",))[0] == group}
            if isinstance(given, group_cls) and not mine:
                composed[group] = given
                continue
            if isinstance(given, BaseModel):
                given = given.model_dump(exclude_unset=True, by_alias=True)
            composed[group] = group_cls(**(given or {}), **mine)
        return composed

    @classmethod
    def fields(cls) -> dict[str, FieldInfo]:
        """Every setting's `FieldInfo` by its outward name (the CLI's flags, the docs, the
        chart)."""
        return {
            name: field
            for group_cls in cls.groups().values()
            for name, field in group_cls.fields().items()
        }


def _unknown(name: str) -> str:
    nearest = difflib.get_close_matches(name, sorted(Root.known_everywhere), n=1, cutoff=0.6)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
    return f"unknown setting {name!r}{hint}"
