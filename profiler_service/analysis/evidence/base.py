"""The base of every evidence model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Evidence(BaseModel):
    """A finding's evidence, or an item of it. Keys a model does not declare are ignored, not
    refused: a snapshot written by another release of the service still reads."""

    model_config = ConfigDict(extra="ignore")
