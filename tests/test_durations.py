"""parse_duration: `500ms`, `5s`, `2m`, bare seconds; anything else names the allowed range."""

from __future__ import annotations

import pytest

from profiler_service.durations import format_seconds, parse_duration
from profiler_service.errors import InvalidDuration

BOUNDS = {"default_s": 5.0, "min_s": 0.1, "max_s": 60.0}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("100ms", 0.1),
        ("5s", 5.0),
        ("3", 3.0),
        ("1.5", 1.5),
        (".5", 0.5),
        ("60s", 60.0),
        ("1m", 60.0),
        (" 5 s ", 5.0),
        ("0.1", 0.1),
    ],
)
def test_parses_units_and_bare_seconds(text: str, seconds: float):
    assert parse_duration(text, **BOUNDS) == pytest.approx(seconds)


def test_minutes_within_a_wider_max():
    assert parse_duration("2m", default_s=5, min_s=0.1, max_s=300) == 120.0


def test_none_means_the_default():
    assert parse_duration(None, **BOUNDS) == 5.0


def test_empty_string_means_the_default():
    assert parse_duration("", **BOUNDS) == 5.0


def test_bounds_are_inclusive():
    assert parse_duration("100ms", **BOUNDS) >= 0.1
    assert parse_duration("60", **BOUNDS) == 60.0


@pytest.mark.parametrize(
    "text",
    [
        "abc",
        "0",
        "0ms",
        "-1",
        "1h",
        "5x",
        "  ",
        "nan",
        "inf",
        "1e3",
        "5 5",
        "5s5",
        "ms",
        "+5",
        "5.5.5",
    ],
)
def test_rejects_what_is_not_a_duration(text: str):
    with pytest.raises(InvalidDuration):
        parse_duration(text, **BOUNDS)


@pytest.mark.parametrize("text", ["99ms", "50ms", "0.05", "61", "61s", "2m", "60001ms"])
def test_rejects_out_of_range(text: str):
    with pytest.raises(InvalidDuration) as info:
        parse_duration(text, **BOUNDS)
    assert "out of range" in info.value.detail


@pytest.mark.parametrize("text", ["abc", "0", "99ms", "61s", "1h"])
def test_error_names_the_allowed_range(text: str):
    with pytest.raises(InvalidDuration) as info:
        parse_duration(text, **BOUNDS)
    assert "100ms" in info.value.detail
    assert "60s" in info.value.detail
    assert info.value.code == "invalid_duration"


def test_error_names_a_custom_range():
    with pytest.raises(InvalidDuration) as info:
        parse_duration("10m", default_s=5, min_s=0.5, max_s=300)
    assert "500ms" in info.value.detail
    assert "300s" in info.value.detail


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.1, "100ms"), (0.5, "500ms"), (1, "1s"), (60, "60s"), (1.5, "1.5s")]
)
def test_format_seconds(seconds: float, text: str):
    assert format_seconds(seconds) == text
