"""The generated reference pages match the code, and the hand-written pages name only settings
and metrics the code has.

When a test here fails after a change to the settings, rules, metrics, error codes or routes:
run `scripts/gen-docs` and commit docs/reference/.
"""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import pytest

from profiler_service.analysis.runner.analyzer import AnalysisFailed
from profiler_service.api.errors import HANDLER_ERRORS
from profiler_service.capture.capturer import CaptureFailed
from profiler_service.docs_reference.configuration import all_fields
from profiler_service.docs_reference.pages import COMMAND, PAGES, REFERENCE_DIR, render
from profiler_service.errors import PipelineFailure, ServiceError, SnapshotErrorCode
from profiler_service.exporters import job_metrics
from profiler_service.trigger.alert_log import Reason

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "profiler_service"
DOCS = ROOT / "docs"
# Environment variables with the prefix that are not settings: the agent's gate in the examples
# (agent.start(env_gate="PROFILER_ENABLE")) and the test suite's own switches.
# ... and the job's own, for its metrics port (exporters/job_metrics.py).
NOT_SETTINGS = {"PROFILER_ENABLE", "PROFILER_COMPAT_TF", job_metrics.PORT_ENV, job_metrics.ADDR_ENV}


@pytest.mark.parametrize("name", list(PAGES))
def test_reference_page_matches_the_code(name):
    path = REFERENCE_DIR / name
    expected = render(name)
    committed = path.read_text() if path.exists() else ""
    if committed != expected:
        diff = "".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(keepends=True),
                    expected.splitlines(keepends=True),
                    f"committed docs/reference/{name}",
                    "rendered from the code",
                )
            )[:60]
        )
        pytest.fail(
            f"docs/reference/{name} differs from the code: run {COMMAND} and commit "
            f"docs/reference/.\n{diff}"
        )


def test_every_setting_has_a_description():
    missing = [name for name, field in all_fields().items() if not field.description]
    assert not missing, (
        f"settings without Field(description=...) in profiler_service/config/: {missing}; "
        f"describe them, then run {COMMAND}"
    )


def test_every_snapshot_error_code_is_described_on_the_page():
    page = (REFERENCE_DIR / "errors-and-outcomes.md").read_text()
    for member in SnapshotErrorCode:
        assert member.description.endswith("."), member
        assert f"| `{member.value}` | {member.description} |" in page, member


def test_a_failure_carries_only_a_code_of_the_enum():
    """The type is the check: a code nothing describes cannot be raised, whatever its spelling."""
    for failure in (PipelineFailure, CaptureFailed, AnalysisFailed):
        assert failure("target_lost", "x").code is SnapshotErrorCode.TARGET_LOST
        with pytest.raises(ValueError):
            failure("target_gone", "x")


def test_every_snapshot_error_code_is_raised_somewhere():
    """A member nothing in the package names is a code no snapshot can end with: drop it."""
    named = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == (
                SnapshotErrorCode.__name__
            ):
                named.add(node.attr)
    unused = {m.name for m in SnapshotErrorCode} - named
    assert not unused, f"SnapshotErrorCode members nothing sets: {sorted(unused)}"


def test_every_alert_reason_is_named_on_the_page():
    page = (REFERENCE_DIR / "errors-and-outcomes.md").read_text()
    missing = [r.value for r in Reason if f"`{r.value}`" not in page]
    assert not missing, f"alert reasons the outcomes' meanings do not name: {missing}"


def test_every_http_error_code_the_handlers_answer_is_described():
    tree = ast.parse((PACKAGE / "api" / "errors.py").read_text())
    answered = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if not (isinstance(key, ast.Constant) and isinstance(value, ast.Constant)):
                    continue
                # {"error": CODE, ...} answers, and _HTTP_CODES {status: CODE}
                if key.value == "error" or isinstance(key.value, int):
                    answered.add(value.value)
    answered.add("http_error")
    known = {cls.code for cls in _subclasses(ServiceError)} | set(HANDLER_ERRORS)
    assert answered - known == set(), (
        f"error codes profiler_service/api/errors.py answers without a description: "
        f"{sorted(answered - known)}; add them to HANDLER_ERRORS, then run {COMMAND}"
    )


def _subclasses(cls: type) -> list[type]:
    return [s for sub in cls.__subclasses__() for s in (sub, *_subclasses(sub))]


def _hand_written() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted(p for p in DOCS.rglob("*.md") if "reference" not in p.parts),
    ]


def test_the_hand_written_pages_name_only_settings_the_code_has():
    env_vars = {f"PROFILER_{name.upper()}" for name in all_fields()}
    unknown = {}
    for path in _hand_written():
        for name in re.findall(r"\bPROFILER_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()):
            if name not in env_vars | NOT_SETTINGS and not name.endswith("_"):
                unknown.setdefault(name, path.relative_to(ROOT).as_posix())
    assert not unknown, f"pages name settings the code does not have: {unknown}"


def test_the_hand_written_pages_name_only_metrics_the_service_exports():
    reference = (REFERENCE_DIR / "metrics.md").read_text()
    exported = set(re.findall(r"^\| `([a-z_:]+)` \|", reference, re.MULTILINE))
    assert len(exported) > 20, "docs/reference/metrics.md lists no metrics: run " + COMMAND
    unknown = {}
    for path in _hand_written():
        # names, not paths (`xprof/pywrap/profiler_plugin_impl.cc`) or the failure code
        # `profiler_busy`
        for name in re.findall(r"(?<![/\w])(profiler_[a-z0-9_]+)", path.read_text()):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            wildcard = name.endswith("_")  # `profiler_gpu_*`
            if name.startswith("profiler_service") or wildcard or name in set(SnapshotErrorCode):
                continue
            if {name, base} & exported:
                continue
            unknown.setdefault(name, path.relative_to(ROOT).as_posix())
    assert not unknown, f"pages name metrics the service does not export: {unknown}"


_UNIT_S = {"": 1, "ms": 0.001, "s": 1, "min": 60, "h": 3600}


def test_defaults_quoted_beside_a_setting_are_its_defaults():
    """`PROFILER_LOOKBACK_S` (300 s), `PROFILER_MEMORY_WATCH_WINDOW_S`, 30 s: the number is the
    setting's default."""
    quoted = re.compile(
        r"`(PROFILER_[A-Z0-9_]+)`(?: \(|, )(\d+(?:\.\d+)?)(?: ?(ms|s|min|h))?(?=[;),])"
    )
    wrong = []
    seen = 0
    for path in _hand_written():
        for name, number, unit in quoted.findall(path.read_text()):
            field = all_fields().get(name.removeprefix("PROFILER_").lower())
            if field is None:
                continue  # test_the_hand_written_pages_name_only_settings_the_code_has says so
            seen += 1
            default = field.get_default(call_default_factory=True)
            if not isinstance(default, int | float) or abs(
                float(number) * _UNIT_S[unit or ""] - default
            ) > 1e-9 * max(1.0, abs(default)):
                wrong.append(f"{path.relative_to(ROOT)}: {name} ({number} {unit}) but {default}")
    assert seen, "no quoted default found: the pattern no longer matches the pages"
    assert not wrong, "pages quote defaults the code does not have:\n" + "\n".join(wrong)
