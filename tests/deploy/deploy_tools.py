"""What the deploy tests share: the chart renderer (Helm v4's engine), Kubernetes schema checks,
promtool/amtool, and the metric names a PromQL expression reads.

Helm comes from `helm-python-sdk` (Helm's Go SDK through a C ABI: no helm binary, no cluster)
and the Kubernetes API schemas from `kubernetes-validate`; both are pinned in pyproject.toml's
`test` extra, which scripts/setup installs. promtool and amtool come from the Debian packages
`prometheus` and `prometheus-alertmanager` (scripts/install-system-packages). A missing tool fails
the test with how to install it; nothing is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "profiler-service"
DEPLOY = ROOT / "deploy"
# The chart's kubeVersion floor (native sidecars) and the newest schemas kubernetes-validate has.
KUBE_VERSIONS = ("1.29.0", "1.37.0")
NAMESPACE = "ml"
RELEASE = "trainer"


def helm():
    try:
        import helm_python
    except ImportError as exc:  # pragma: no cover - the message is the point
        pytest.fail(
            f"helm-python-sdk is missing ({exc}): run scripts/setup test "
            "(pip install -e '.[test]' installs helm-python-sdk==0.2.2)",
            pytrace=False,
        )
    return helm_python


def kubernetes_validate():
    try:
        import kubernetes_validate
    except ImportError as exc:  # pragma: no cover
        pytest.fail(
            f"kubernetes-validate is missing ({exc}): run scripts/setup test "
            "(pip install -e '.[test]' installs kubernetes-validate==1.37.0)",
            pytrace=False,
        )
    return kubernetes_validate


def install_dry_run(
    values: dict[str, Any],
    chart: Path = CHART,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[dict]:
    """`helm install --dry-run=client`: Helm's own schema check, rendering and manifest sorting."""
    h = helm()
    config = h.Config(storage_driver="memory", namespace=namespace)
    try:
        installed = config.install(
            str(chart), release, values, dry_run="client", namespace=namespace
        )
        return [doc for doc in yaml.safe_load_all(installed["manifest"]) if doc]
    finally:
        config.close()


def install_error(values: dict[str, Any]) -> str:
    """The message Helm refuses these values with (fails the test if it accepts them)."""
    h = helm()
    try:
        install_dry_run(values)
    except h.HelmError as exc:
        return str(exc)
    pytest.fail(f"helm accepted values it should refuse: {values}")


def lint(values: dict[str, Any], chart: Path = CHART) -> dict:
    return helm().lint(str(chart), values, strict=True, namespace=NAMESPACE)


def validate_kubernetes(doc: dict) -> None:
    """Validate a built-in object against the Kubernetes API schemas (strict: no unknown fields)."""
    kv = kubernetes_validate()
    for version in KUBE_VERSIONS:
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:
            name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            raise AssertionError(
                f"{name} is not a valid Kubernetes {version} object: {exc.message} "
                f"at {'/'.join(map(str, exc.path))}"
            ) from None


def binary(name: str) -> str:
    found = shutil.which(name) or (
        f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None
    )
    if found is None:
        package = {"promtool": "prometheus", "amtool": "prometheus-alertmanager"}[name]
        pytest.fail(
            f"{name} is missing: run scripts/install-system-packages as root, or "
            f"apt-get install {package}",
            pytrace=False,
        )
    return found


def run_tool(*args: str) -> str:
    done = subprocess.run([binary(args[0]), *args[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.$])[A-Za-z_:][\w:]*")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
_KEYWORDS |= {"and", "or", "unless", "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """The metric (and recording rule) names a PromQL expression reads."""
    text = _STRINGS.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery selectors
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\{?[\w.]+\}?", " ", text)  # Grafana variables ($__rate_interval)
    names = set()
    for match in _IDENT.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group().lower() not in _KEYWORDS:
            names.add(match.group())
    return names


def rule_groups(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())["groups"]
