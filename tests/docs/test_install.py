"""The install commands the README and docs/ give work from a clone: nothing is published, so
every `pip install` of this project names the clone or the wheel `scripts/build-wheel` writes,
with extras pyproject.toml defines; the wheel is tagged with the version and its extras resolve;
the images' build commands name the Dockerfiles there are, tagged as the chart expects."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from profiler_service import __version__

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
WHEEL = f"dist/profiler_service-{VERSION}-py3-none-any.whl"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
THIS_PROJECT = re.compile(r"^(profiler[-_]service|\.|\./|dist/profiler_service)")


# An argument of `pip install`: quoted, an option, or a bare word with a dot, slash or bracket
# (prose after the command, "into the job's environment", is none of these).
_ARG = r"""(?:"[^"]*"|'[^']*'|-[^\s`]+|[^\s`'"#]*[./\[][^\s`'"#]*)"""
_PIP_INSTALL = re.compile(rf"pip install((?:[ \t]+{_ARG})+)")


def pip_installs() -> list[tuple[str, str]]:
    """(page, argument) for every non-option argument of every `pip install` the pages show."""
    found = []
    for page in PAGES:
        for command in _PIP_INSTALL.findall(page.read_text()):
            args = [a for a in shlex.split(command) if not a.startswith("-")]
            found += [(page.name, a) for a in args]
    return found


def split(argument: str) -> tuple[str, set[str]]:
    """`./x[a,b]` -> ('./x', {'a', 'b'})."""
    match = re.fullmatch(r"(.+?)(?:\[([^\]]*)\])?", argument)
    assert match, argument
    return match.group(1), {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}


def test_every_install_of_this_project_names_the_clone_or_the_built_wheel():
    ours = [(page, a) for page, a in pip_installs() if THIS_PROJECT.match(a)]
    assert len(ours) >= 6, ours  # the README's sidecar and agent, getting-started's table, ...
    for page, argument in ours:
        where, extras = split(argument)
        # By name it is looked up in an index, where nothing is published.
        assert not re.match(r"profiler[-_]service", where), f"{page}: {argument} is not published"
        if where.startswith("dist/"):
            assert where == WHEEL, f"{page}: {argument} is not the wheel of {VERSION}"
        else:
            assert (ROOT / where / "pyproject.toml").exists(), f"{page}: {argument}"
        assert extras <= EXTRAS, f"{page}: {argument}: no extra {extras - EXTRAS}"


def test_the_readme_says_how_to_build_the_wheel_and_the_script_exists():
    readme = (ROOT / "README.md").read_text()
    assert "scripts/build-wheel" in readme and WHEEL in readme
    assert (ROOT / "scripts" / "build-wheel").stat().st_mode & 0o111


def test_every_image_has_its_build_command_in_the_docs_tagged_as_the_chart_expects():
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    builds = dict(re.findall(r"docker build -f (\S+) -t (\S+) \.", deployment))
    dockerfiles = {p.relative_to(ROOT).as_posix() for p in (ROOT / "deploy/docker").glob("*")}
    assert set(builds) == dockerfiles
    chart = (ROOT / "helm/profiler-service/Chart.yaml").read_text()
    values = (ROOT / "helm/profiler-service/values.yaml").read_text()
    app_version = re.search(r'^appVersion: "?([^"\s]+)', chart, re.M).group(1)
    assert app_version == VERSION
    assert builds["deploy/docker/sidecar.Dockerfile"] == f"profiler-service:{app_version}"
    job_image = re.search(r"^  image: (\S+)", values, re.M).group(1)
    assert builds["deploy/docker/job.Dockerfile"] == job_image


@pytest.mark.timeout(240)
def test_the_built_wheel_is_tagged_with_the_version_and_its_extras_resolve(tmp_path):
    """scripts/build-wheel on a copy of the project (so nothing is written into the checkout),
    offline: this environment's setuptools, no index."""
    copy = tmp_path / "clone"
    (copy / "scripts").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    shutil.copy(ROOT / "scripts" / "build-wheel", copy / "scripts")
    shutil.copytree(
        ROOT / "profiler_service", copy / "profiler_service", ignore=shutil.ignore_patterns("*.pyc")
    )
    built = subprocess.run(
        [copy / "scripts" / "build-wheel", "--no-build-isolation", "--no-index"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)},
        timeout=200,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout.strip() == WHEEL
    wheel = copy / WHEEL
    assert __version__ == VERSION
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"profiler_service-{VERSION}.dist-info/METADATA").decode()
        names = set(archive.namelist())
    assert f"\nVersion: {VERSION}\n" in metadata
    provided = set(re.findall(r"^Provides-Extra: (\S+)", metadata, re.M))
    assert provided == EXTRAS
    # What the sidecar's report page and the hub's migrations need is in it.
    assert "profiler_service/exporters/templates/report.html" in names
    assert "profiler_service/hub/index/migrations/script.py.mako" in names
    # The extras the docs install resolve against what this environment has, offline.
    documented = set().union(*(split(a)[1] for _, a in pip_installs() if THIS_PROJECT.match(a)))
    assert {"sidecar", "agent"} <= documented
    report = tmp_path / "report.json"
    resolved = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--quiet",
         "--disable-pip-version-check", "--report", str(report),
         f"{wheel}[{','.join(sorted(documented))}]"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    assert "does not provide the extra" not in resolved.stderr, resolved.stderr
    installs = json.loads(report.read_text())["install"]
    ours = [i for i in installs if i["metadata"]["name"] == "profiler-service"]
    assert [i["metadata"]["version"] for i in ours] == [VERSION]
    assert documented <= set(ours[0]["requested_extras"])


EDITABLE = """
import json, sys, warnings
import setuptools.build_meta as backend
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    name = backend.build_editable(sys.argv[1])
print(json.dumps({"wheel": name, "warnings": [str(w.message) for w in caught]}))
"""


@pytest.mark.timeout(240)
def test_an_editable_install_prints_no_warning_box(tmp_path):
    """What scripts/setup runs (`pip install -e`), through setuptools' own editable hook: with the
    package's root declared, a plain .pth file, not the meta path finder whose warning box
    ("Please be careful with folders in your working directory ...") scripts/demo printed."""
    copy = tmp_path / "clone"
    copy.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    shutil.copytree(
        ROOT / "profiler_service", copy / "profiler_service", ignore=shutil.ignore_patterns("*.pyc")
    )
    out = tmp_path / "wheel"
    out.mkdir()
    built = subprocess.run(
        [sys.executable, "-c", EDITABLE, str(out)],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    result = json.loads(built.stdout.strip().splitlines()[-1])
    assert not [w for w in result["warnings"] if "Please be careful" in w], result["warnings"]
    with zipfile.ZipFile(out / result["wheel"]) as archive:
        pth = [n for n in archive.namelist() if n.endswith(".pth")]
        assert len(pth) == 1
        assert Path(archive.read(pth[0]).decode().strip()).resolve() == copy.resolve()
        assert not [n for n in archive.namelist() if n.endswith("finder.py")]
