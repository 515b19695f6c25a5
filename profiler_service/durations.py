"""Capture durations as people write them: `500ms`, `5s`, `2m`, or bare seconds.

Neutral ground: the triggers parse with it (HTTP, webhooks, the CLI) and the controller names
its bounds with it (`format_seconds`), so neither package imports the other for it."""

from __future__ import annotations

import math
import re

from profiler_service.errors import InvalidDuration

_DURATION = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>ms|s|m)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def format_seconds(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def parse_duration(text: str | None, *, default_s: float, min_s: float, max_s: float) -> float:
    """Seconds for `text`, or raise InvalidDuration naming the allowed range."""
    allowed = f"between {format_seconds(min_s)} and {format_seconds(max_s)} (e.g. 500ms, 5s, 2m)"
    if text is None or text == "":
        return default_s
    match = _DURATION.match(text)
    if not match:
        raise InvalidDuration(f"duration {text!r} is not understood; give a duration {allowed}")
    seconds = float(match["value"]) * _UNIT_S[match["unit"]]
    if not math.isfinite(seconds) or not min_s <= seconds <= max_s:
        raise InvalidDuration(f"duration {text!r} is out of range; give a duration {allowed}")
    return seconds
