"""Prometheus's history of the minutes before a snapshot: configured PromQL over `query_range`.

Everything here reports trouble as notes and never raises: a snapshot must not fail because
Prometheus is down, slow, or refuses a query. Variables are substituted as quoted PromQL strings,
so a label value taken from an alert cannot change what a query asks.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from string import Template
from typing import Any

import httpx

from profiler_service.config import PromQuery
from profiler_service.lookback.models import Series

__all__ = [
    "MAX_SERIES_PER_QUERY",
    "MissingVariable",
    "lead_up_variables",
    "promql_string",
    "query_lead_up",
    "render_query",
]

# A query that matches a whole fleet would bloat every snapshot; the first ones (in Prometheus's
# order, sorted by labels) are kept and the cut is noted.
MAX_SERIES_PER_QUERY = 20
_MIN_STEP_S = 1.0
_PLACEHOLDER_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE = re.compile(r'[\\"\x00-\x1f\x7f]')


class MissingVariable(ValueError):
    """A query names `$name` and the snapshot has no such variable."""

    def __init__(self, name: str):
        super().__init__(f"no variable ${name}")
        self.name = name


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal that means exactly `value`.

    Lone surrogates (from JSON such as "\\ud800") cannot be sent as UTF-8: they become U+FFFD.
    """
    value = _SURROGATE.sub("\ufffd", value)
    escaped = _NEEDS_ESCAPE.sub(
        lambda m: _ESCAPES.get(m[0]) or f"\\x{ord(m[0]):02x}",
        value,
    )
    return f'"{escaped}"'


def render_query(expr: str, variables: Mapping[str, str]) -> str:
    """`expr` with `$name`/`${name}` replaced by the variable as a quoted PromQL string
    (`{pod=$pod}` -> `{pod="trainer-0"}`) and `$$` by `$`.

    Raises MissingVariable for a placeholder without a variable, ValueError for a `$` that starts
    no placeholder.
    """

    def replace(match: re.Match[str]) -> str:
        name = match["named"] or match["braced"]
        if name is not None:
            if name not in variables:
                raise MissingVariable(name)
            return promql_string(str(variables[name]))
        if match["escaped"] is not None:
            return "$"
        column = match.start() + 1  # where the $ is
        raise ValueError(f"a $ at column {column} starts no $name or ${{name}} (write $$ for $)")

    return Template.pattern.sub(replace, expr)


def lead_up_variables(
    target: str, labels: Mapping[str, str], pod: str | None = None, namespace: str | None = None
) -> dict[str, str]:
    """The variables of a snapshot's queries: the trigger's labels, then `target`, and `pod` and
    `namespace` where the settings know them (PROFILER_POD_NAME, PROFILER_POD_NAMESPACE, which
    the controller stamps on every snapshot).

    The service's own knowledge wins over a label of the same name: an alert cannot point $pod
    at another pod's data. Where the settings do not know the pod (a service outside the job's
    pod), an alert's `pod` label is what $pod means. Labels whose names cannot be placeholders
    (`app.kubernetes.io/name`) are left out.
    """
    variables = {k: str(v) for k, v in labels.items() if _PLACEHOLDER_NAME.fullmatch(k)}
    variables["target"] = target
    if pod:
        variables["pod"] = pod
    if namespace:
        variables["namespace"] = namespace
    return variables


def query_lead_up(
    url: str,
    queries: Sequence[PromQuery],
    variables: Mapping[str, str],
    start: datetime,
    end: datetime,
    *,
    timeout_s: float = 5.0,
    client: httpx.Client | None = None,
    max_points: int = 300,
    max_series: int = MAX_SERIES_PER_QUERY,
) -> tuple[list[Series], list[str]]:
    """Each query over [start, end] through `{url}/api/v1/query_range`: the series it returned,
    and notes on what could not be read and why. Never raises for anything Prometheus does.

    `timeout_s` is for all the queries together: each is asked within what is left of it, and
    the ones left when it is spent are noted, not asked (a Prometheus that accepts connections
    and never answers would otherwise cost queries x timeout).

    The step is the window over `max_points`, at least 1 s. Points are Prometheus's evaluations
    at start, start + step, ... (each the latest sample at that time, not raw samples); NaN and
    infinite values are dropped. Naive datetimes are taken as local time (datetime.timestamp).
    After a connection failure the remaining queries are not asked: each would wait as long.
    """
    start_s, end_s = start.timestamp(), end.timestamp()
    if end_s < start_s:
        return [], [f"Prometheus not asked: the window ends ({end}) before it starts ({start})"]
    step_s = max(_MIN_STEP_S, (end_s - start_s) / max(1, max_points))
    window = {"start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": _seconds(step_s)}
    endpoint = f"{url.rstrip('/')}/api/v1/query_range"
    series: list[Series] = []
    notes: list[str] = []
    own_client = client is None
    http = client if client is not None else httpx.Client(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    try:
        for i, query in enumerate(queries):
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                left = ", ".join(q.name for q in queries[i:])
                spent = f"the lead-up's {timeout_s:g} s were spent"
                notes.append(f"queries not asked: {left} ({spent})")
                break
            try:
                promql = render_query(query.expr, variables)
            except MissingVariable as exc:
                have = ", ".join(sorted(variables)) or "none"
                notes.append(
                    f"query {query.name} not asked: it needs ${exc.name}, which this snapshot "
                    f"does not have (have: {have})"
                )
                continue
            except ValueError as exc:
                notes.append(f"query {query.name} not asked: {exc}")
                continue
            try:
                response = http.get(endpoint, params={"query": promql, **window}, timeout=left_s)
            except (
                httpx.ConnectError,
                httpx.ConnectTimeout,
                httpx.UnsupportedProtocol,
                httpx.InvalidURL,
            ) as exc:
                notes.append(f"Prometheus at {url} unreachable: {_describe(exc)}")
                left = [q.name for q in queries[i:]]
                notes.append(f"queries not asked: {', '.join(left)}")
                break
            except httpx.TimeoutException:
                notes.append(
                    f"query {query.name}: no answer from Prometheus within the lead-up's "
                    f"{timeout_s:g} s"
                )
                continue
            except httpx.HTTPError as exc:
                notes.append(f"query {query.name}: no answer from Prometheus: {_describe(exc)}")
                continue
            found, query_notes = _read_response(query, promql, response, max_series)
            series.extend(found)
            notes.extend(query_notes)
    finally:
        if own_client:
            http.close()
    return series, notes


def _read_response(
    query: PromQuery, promql: str, response: httpx.Response, max_series: int
) -> tuple[list[Series], list[str]]:
    """One query_range answer as series and notes; a body that is not Prometheus's is a note."""
    where = f"query {query.name}"
    try:
        body = response.json()
    except ValueError:
        return [], [f"{where}: HTTP {response.status_code}, not JSON: {_snippet(response.text)}"]
    if not isinstance(body, dict):
        return [], [f"{where}: HTTP {response.status_code}, unexpected body {_snippet(body)}"]
    notes = [f"{where}: Prometheus warns: {w}" for w in body.get("warnings") or []]
    if body.get("status") != "success":
        kind = body.get("errorType") or f"HTTP {response.status_code}"
        error = body.get("error") or _snippet(body)
        return [], [*notes, f"{where} failed: Prometheus says {kind}: {error}"]
    try:
        found, kept_empty = _matrix(query, promql, body["data"])
    except (KeyError, TypeError, ValueError) as exc:
        return [], [*notes, f"{where}: unexpected answer from Prometheus ({exc!r})"]
    if not found and not kept_empty:
        notes.append(f"{where} matched no series in the window: {promql}")
    if kept_empty:
        notes.append(
            f"{where}: {kept_empty} series had only NaN or infinite values (0/0 when nothing "
            "happened?), left out"
        )
    if len(found) > max_series:
        notes.append(f"{where} returned {len(found)} series; the first {max_series} are kept")
        found = found[:max_series]
    return found, notes


def _matrix(query: PromQuery, promql: str, data: Any) -> tuple[list[Series], int]:
    """The series of a matrix result, and how many had no finite value."""
    if data["resultType"] != "matrix":
        raise ValueError(f"result type {data['resultType']!r}, not matrix")
    found: list[Series] = []
    empty = 0
    for item in data["result"]:
        points = [(float(t), float(v)) for t, v in item.get("values") or []]
        points = [(t, v) for t, v in points if math.isfinite(v)]
        if not points:
            empty += 1
            continue
        labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
        found.append(
            Series(
                name=query.name,
                unit=query.unit,
                source="prometheus",
                labels=labels,
                query=promql,
                points=points,
            )
        )
    return found, empty


def _seconds(value: float) -> str:
    """Seconds as Prometheus takes them (a float): `2`, `1.5`."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _snippet(value: object, limit: int = 200) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
