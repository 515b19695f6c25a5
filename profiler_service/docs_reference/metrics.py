"""docs/reference/metrics.md: every metric family of a real scrape of the service's `/metrics`
(and of the fleet hub's, where the package has one).

`render()` runs `scrape()` in a child process (`python -m profiler_service.docs_reference.metrics`):
a real service over a temporary store, with an in-process target (the agent's collectors) and a
remote one, a bucket mirror (the upload series), Grafana annotations, one marked step and one
ready snapshot (the latest-analysis series), so every family has a reason to appear. The child
puts in two stand-ins that only it sees: tests/deploy/nvml_standin's `pynvml` with one GPU, and
a `tensorflow` module whose one GPU answers get_memory_info. The families' names, types, help and
labels are the real ones.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from profiler_service.docs_reference.markdown import code, table

NVML_STANDIN = Path(__file__).resolve().parents[2] / "tests" / "deploy" / "nvml_standin"

INTRO = """# Metrics

What `GET /metrics` exports, read from a real scrape of the service (with a stand-in GPU, so the
per-GPU families appear). Units are in the names; counters end in `_total`. Which process exports
which family, the DCGM translation and example queries: [Metrics](../metrics.md).

"""

# Where each family comes from, by name prefix, for the page's sections (longest prefix wins).
SECTIONS = {
    "profiler_": "Service",
    "profiler_latest_": "Latest analysis per target",
    "profiler_gpu_": "GPUs (NVML)",
    "profiler_host_": "Host",
    "profiler_training_": "In the training process (agent or job metrics server)",
    "profiler_tf_": "In the training process (agent or job metrics server)",
    "profiler_memory_": "The look-back sampler and the memory watch",
    "process_": "This process (prometheus_client's process collector)",
    "profiler_fleet_": "Fleet hub (`profiler-service hub`)",
}
_LABELS_IGNORED = {"le", "quantile"}


def render() -> str:
    families = _scrape_in_child()
    by_section: dict[str, list[dict[str, Any]]] = {}
    for family in families:
        by_section.setdefault(section_of(family["name"]), []).append(family)
    parts = [INTRO]
    for section in dict.fromkeys(SECTIONS.values()):
        rows = [
            (code(f["name"]), f["type"], ", ".join(code(x) for x in f["labels"]), f["help"])
            for f in by_section.get(section, [])
        ]
        if rows:
            parts.append(f"## {section}\n\n" + table(["metric", "type", "labels", "help"], rows))
    return "\n".join(parts)


def section_of(name: str) -> str:
    prefix = max((p for p in SECTIONS if name.startswith(p)), key=len, default=None)
    if prefix is None:
        raise ValueError(f"metric {name} has no section: add its prefix to SECTIONS in {__file__}")
    return SECTIONS[prefix]


def _scrape_in_child() -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "profiler_service.docs_reference.metrics"],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PROFILER_")},
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        },
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the metrics scrape failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout)


def _fake_tensorflow() -> types.ModuleType:
    device = types.SimpleNamespace(name="/device:GPU:0", device_type="GPU")
    tf = types.ModuleType("tensorflow")
    tf.config = types.SimpleNamespace(  # type: ignore[attr-defined]
        list_logical_devices=lambda: [device],
        experimental=types.SimpleNamespace(
            get_memory_info=lambda name: {"current": 1 << 20, "peak": 2 << 20}
        ),
    )
    return tf


def scrape() -> list[dict[str, Any]]:
    """[{name, type, help, labels}] of every family the service (and the fleet hub, where the
    package has one) exports, in exposition order."""
    sys.path.insert(0, str(NVML_STANDIN))
    sys.modules["tensorflow"] = _fake_tensorflow()
    # ...whose runtime the job has started (probes/tf_memory.started_tensorflow reads no earlier)
    started = types.SimpleNamespace(_initialized=True)
    eager = types.ModuleType("tensorflow.python.eager.context")
    eager.context_safe = lambda: started  # type: ignore[attr-defined]
    sys.modules["tensorflow.python.eager.context"] = eager
    from prometheus_client.parser import text_string_to_metric_families

    with tempfile.TemporaryDirectory() as tmp:
        scrapes = [_scrape_service(Path(tmp) / "service")]
        if importlib.util.find_spec("profiler_service.hub") is not None:
            scrapes.append(_scrape_hub(Path(tmp) / "hub"))
    families: dict[str, dict[str, Any]] = {}
    for text, declared in scrapes:
        parsed = list(text_string_to_metric_families(text))
        instrumented = {f.name for f in parsed if f.type in ("counter", "histogram")}
        for family in parsed:
            if family.name.endswith("_created") and (
                family.name.removesuffix("_created") in instrumented
            ):
                continue  # prometheus_client's creation time of a counter or histogram
            name = family.name + ("_total" if family.type == "counter" else "")
            if name not in families:
                families[name] = _describe(name, family, declared)
    return list(families.values())


def _describe(name: str, family: Any, declared: dict[str, list[str]]) -> dict[str, Any]:
    labels = list(declared.get(family.name, []))
    for sample in family.samples:
        labels += [k for k in sample.labels if k not in labels and k not in _LABELS_IGNORED]
    bounds = sorted(
        {float(x.labels["le"]) for x in family.samples if x.labels.get("le", "+Inf") != "+Inf"}
    )
    help_text = family.documentation
    if bounds:
        help_text += f" Buckets: {', '.join(f'{b:g}' for b in bounds)}."
    return {"name": name, "type": family.type, "help": help_text, "labels": labels}


def _scrape_service(tmp: Path) -> tuple[str, dict[str, list[str]]]:
    from fastapi.testclient import TestClient

    from profiler_service.api.app import create_app
    from profiler_service.config import Settings
    from profiler_service.models import CaptureOptions, Snapshot, Trigger
    from profiler_service.probes.steps import STEP_STATS
    from profiler_service.service import build_service
    from profiler_service.targets import Target, in_process_target

    settings = Settings(
        store=tmp / "store",
        store_url=(tmp / "bucket").as_uri(),
        targets=[in_process_target(), Target.parse("trainer=grpc://127.0.0.1:9")],
        grafana_url="http://127.0.0.1:9",  # the annotation counter; nothing is ever sent
        grafana_token="unused",
    )
    service = build_service(settings)
    try:
        snapshot = Snapshot(
            id="20260105-120000-trainer-000000000000",
            target="trainer",
            trigger=Trigger(),
            capture=CaptureOptions(
                duration_ms=1000, host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
            ),
        )
        logdir = service.store.begin(snapshot)
        (Path(logdir) / "host.xplane.pb").write_bytes(b"x")
        service.store.adopt_capture(snapshot, [Path(logdir) / "host.xplane.pb"])
        service.store.publish(snapshot)
        STEP_STATS.observe(0.1)  # one marked step: the step histogram's series
        declared = _declared_labels(service.metrics.registry)
        return TestClient(create_app(service)).get("/metrics").text, declared
    finally:
        service.stop()


def _scrape_hub(tmp: Path) -> tuple[str, dict[str, list[str]]]:
    """The fleet hub (`profiler-service hub`) over an empty bucket."""
    from fastapi.testclient import TestClient

    from profiler_service.config import HubSettings
    from profiler_service.hub.app import create_hub_app
    from profiler_service.hub.fleet import build_hub

    hub = build_hub(HubSettings(store=tmp / "index", store_url=(tmp / "bucket").as_uri()))
    try:
        declared = _declared_labels(hub.metrics.registry)
        return TestClient(create_hub_app(hub)).get("/metrics").text, declared
    finally:
        hub.stop()


def _declared_labels(registry: Any) -> dict[str, list[str]]:
    """{family name: label names} as declared, so a family with no series yet has its labels:
    instrumented metrics (Counter, Histogram) and the collectors' families."""
    declared: dict[str, list[str]] = {}
    for collector, names in registry._collector_to_names.items():
        labels = list(getattr(collector, "_labelnames", ()))
        for name in names:
            declared[name] = labels
    for family in registry.collect():
        declared.setdefault(family.name, list(getattr(family, "_labelnames", ())))
    return declared


if __name__ == "__main__":
    json.dump(scrape(), sys.stdout)
