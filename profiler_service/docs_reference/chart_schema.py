"""The Helm chart's schema for `sidecar.settings` and `hub.settings`, generated from the settings:
each offers its own process's settings only (the sidecar's `Settings`, the hub's `HubSettings`,
less the ones the chart sets itself), with type and description, so `helm install` refuses a
misspelt or mistyped one, and a hub setting given to the sidecar (or the reverse), where it would
do nothing; the chart never lags the code. Written by `scripts/gen-docs`; a test fails when the
committed schema differs.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

from profiler_service.config import HubSettings, Settings
from profiler_service.config.base import Root

SCHEMA = Path(__file__).resolve().parents[2] / "helm" / "profiler-service" / "values.schema.json"

# What the chart's templates set from its own values (ports, the store, credentials from its
# Secret, the pod's identity from the downward API, the hub's address): not offered twice.
SIDECAR_CHART_SETS = frozenset({
    "host", "port", "insecure", "api_token", "store", "targets", "public_url",
    "webhook_token", "webhook_username", "webhook_password", "webhook_hmac_secret",
    "grafana_token", "store_options", "watch_process", "pod_name", "pod_namespace",
    "hub_url", "hub_token", "hub_advertise_url", "workload",
})  # fmt: skip
# The hub's container (templates/hub.yaml): its bucket is hub.storeUrl, its index
# hub.database, its tenants hub.tenants.
HUB_CHART_SETS = frozenset({
    "host", "port", "insecure", "api_token", "store", "store_url", "store_options",
    "webhook_token", "webhook_username", "webhook_password", "webhook_hmac_secret",
    "hub_token", "tokens_file", "hub_database_url",
})  # fmt: skip
# (the values' key, its root, what the chart sets itself)
SECTIONS: list[tuple[str, type[Root], frozenset[str]]] = [
    ("sidecar", Settings, SIDECAR_CHART_SETS),
    ("hub", HubSettings, HUB_CHART_SETS),
]

# Every setting may also come as the string its environment variable would hold.
_JSON_TYPES: list[tuple[type, list[str] | str]] = [
    (bool, ["boolean", "string"]),
    (int, ["integer", "string"]),
    (float, ["number", "string"]),
    (list, ["array", "string"]),
    (dict, ["object", "string"]),
]


def json_type(annotation: Any) -> list[str] | str:
    """The JSON schema type of a setting's annotation (`float | None` -> number or string)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return json_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return json_type(kinds[0]) if len(kinds) == 1 else "string"
    base = origin or annotation
    for python, kind in _JSON_TYPES:
        if isinstance(base, type) and issubclass(base, python):
            return kind
    return "string"  # str, SecretStr, Path, an enum, a Literal


def settings_properties(root: type[Root], chart_sets: frozenset[str]) -> dict[str, dict[str, Any]]:
    """Each setting of `root` the chart leaves to the user, by name, in the configuration
    page's order."""
    properties: dict[str, dict[str, Any]] = {}
    for name, field in root.fields().items():
        if name in chart_sets:
            continue
        entry: dict[str, Any] = {"type": json_type(field.annotation)}
        if field.description:
            entry["description"] = field.description
        properties[name] = entry
    return properties


def render() -> str:
    schema = json.loads(SCHEMA.read_text())
    for key, root, chart_sets in SECTIONS:
        settings = schema["properties"][key]["properties"]["settings"]
        settings["additionalProperties"] = False
        settings["properties"] = settings_properties(root, chart_sets)
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def stale() -> bool:
    return SCHEMA.read_text() != render()


def write() -> Path:
    SCHEMA.write_text(render())
    return SCHEMA
