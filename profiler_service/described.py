"""An enum whose members each carry what they mean (`description`), written beside the value:
a member cannot be added without saying what it means, and the reference pages
(docs/reference/errors-and-outcomes.md) read it from the member itself."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Described"]


class Described(StrEnum):
    """A `StrEnum` whose members are `NAME = ("value", "what it means")`; the value is what the
    JSON, the metrics' labels and the API carry."""

    description: str

    def __new__(cls, value: str, description: str) -> Described:
        member = str.__new__(cls, value)
        member._value_ = value
        member.description = description
        return member
