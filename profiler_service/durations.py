"""Capture durations as people write them: `500ms`, `5s`, `2m`, or bare seconds.

Neutral ground: the triggers parse with it (HTTP, webhooks, the CLI) and the controller names
its bounds with it (`format_seconds`), so neither package imports the other for it."""

from __future__ import annotations

import math
import re

from profiler_service.errors import InvalidDuration

_DURATION = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>ms|s|m)?\s*$")
_UNIT_S: dict[str | None, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def format_seconds(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def parse_duration(text: str | None, *, default_s: float, min_s: float, max_s: float) -> float:
    """Seconds for `text`, or raise InvalidDuration naming the allowed range."""
    if text is None or text == "":
        return default_s
    allowed = f"between {format_seconds(min_s)} and {format_seconds(max_s)} (e.g. 500ms, 5s, 2m)"
    return _seconds("duration", text, _DURATION, _UNIT_S, min_s, max_s, allowed)


def _seconds(
    what: str,
    text: str,
    pattern: re.Pattern[str],
    units: dict[str | None, float],
    min_s: float,
    max_s: float,
    allowed: str,
) -> float:
    """`text` read by `pattern` (a value and a unit) in seconds, within [min_s, max_s]."""
    match = pattern.match(text)
    if not match:
        raise InvalidDuration(f"{what} {text!r} is not understood; give a {what} {allowed}")
    seconds = float(match["value"]) * units[match["unit"]]
    if not math.isfinite(seconds) or not min_s <= seconds <= max_s:
        raise InvalidDuration(f"{what} {text!r} is out of range; give a {what} {allowed}")
    return seconds


_WINDOW = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>s|m|h|d|w)\s*$")
_WINDOW_UNIT_S: dict[str | None, float] = {
    "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0
}  # fmt: skip


def parse_window(text: str, *, min_s: float, max_s: float) -> float:
    """Seconds for a window of hours or days (`30m`, `24h`, `7d`, `2w`), or InvalidDuration."""
    allowed = f"between {format_window(min_s)} and {format_window(max_s)} (e.g. 24h, 7d)"
    return _seconds("window", text, _WINDOW, _WINDOW_UNIT_S, min_s, max_s, allowed)


def format_window(seconds: float) -> str:
    """`24h`, `7d`, `90m`: the largest unit up to days that divides it."""
    for unit in ("d", "h", "m"):
        if seconds >= _WINDOW_UNIT_S[unit] and seconds % _WINDOW_UNIT_S[unit] == 0:
            return f"{seconds / _WINDOW_UNIT_S[unit]:g}{unit}"
    return f"{seconds:g}s"
