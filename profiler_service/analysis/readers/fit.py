"""A least-squares line: how fast something grows, and how much it looks like a line."""

from __future__ import annotations

from collections.abc import Sequence


def fit_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(slope of y over x, R²); R² is 0 when y does not vary, the slope 0 when x does not."""
    n = len(points)
    if n < 2:
        return 0.0, 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    syy = sum((y - my) ** 2 for _, y in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    if sxx == 0:
        return 0.0, 0.0
    return sxy / sxx, (sxy * sxy / (sxx * syy)) if syy else 0.0
