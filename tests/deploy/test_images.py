"""deploy/docker and the extras: the sidecar image installs XProf and no TensorFlow; the example
job's image installs TensorFlow; the base install (the agent, inside a job) pins nothing that
TensorFlow pins.

Checked from the files, offline: what each Dockerfile pip-installs, the project's base
dependencies in pyproject.toml, and their installed dependency closure in this environment.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from importlib.metadata import PackageNotFoundError, requires

from deploy_tools import DEPLOY, ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DOCKER = DEPLOY / "docker"
FRAMEWORKS = ("tensorflow", "tf-keras", "tf-nightly", "keras", "jax", "torch")


def pip_install_targets(dockerfile: str) -> list[str]:
    """Arguments of every `pip install` in the Dockerfile that are not options."""
    text = re.sub(r"\\\n", " ", dockerfile)
    targets = []
    for command in re.findall(r"pip install ([^&;\n]+)", text):
        targets += [a for a in shlex.split(command) if not a.startswith("-")]
    return targets


def is_framework(name: str) -> bool:
    name = canonicalize_name(name)
    return any(name == f or name.startswith(f"{f}-") for f in FRAMEWORKS)


def closure(distribution: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """The installed distributions `distribution` (with `extras`) pulls in, by requirement."""
    seen: set[str] = set()
    todo = [(distribution, extras)]
    while todo:
        name, wanted = todo.pop()
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue  # an optional platform dependency not installed here
        for line in reqs:
            req = Requirement(line)
            envs = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if req.marker and not any(req.marker.evaluate(env) for env in envs):
                continue
            key = canonicalize_name(req.name)
            if key not in seen:
                seen.add(key)
                todo.append((req.name, frozenset(req.extras)))
    return seen


# What TensorFlow 2.15-2.21 pin (protobuf<5 on 2.15, numpy<2 before 2.18, grpcio, ...): the
# agent's install must pull in none of them, or it may move the job's own versions.
TF_PINNED = {"protobuf", "numpy", "grpcio", "ml-dtypes", "h5py", "keras", "tensorboard"}


def test_sidecar_image_installs_the_sidecar_extra():
    dockerfile = (DOCKER / "sidecar.Dockerfile").read_text()
    assert pip_install_targets(dockerfile) == ["/src[sidecar]"]
    assert "tensorflow" not in dockerfile.lower().replace("no tensorflow", "")
    assert re.search(r"^USER 65532", dockerfile, re.MULTILINE)


def test_the_agents_install_pulls_in_nothing_tensorflow_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = [canonicalize_name(Requirement(r).name) for r in project["dependencies"]]
    assert not [n for n in base if is_framework(n)]
    pulled = closure("profiler-service") | closure("profiler-service", frozenset({"agent"}))
    assert "fastapi" in pulled and "prometheus-client" in pulled
    assert not sorted(pulled & TF_PINNED), "the agent would move the job's pins"
    assert "xprof" not in pulled


def test_the_sidecar_extra_brings_xprof_and_no_ml_framework():
    pulled = closure("profiler-service", frozenset({"sidecar"}))
    assert {"xprof", "grpcio", "fsspec", "protobuf"} <= pulled
    assert not sorted(n for n in pulled if is_framework(n)), pulled
    # The check can see TensorFlow: the tf extra does pull it in.
    assert any(is_framework(n) for n in closure("profiler-service", frozenset({"tf"})))


def test_example_job_image_installs_tensorflow_through_the_tf_extra():
    dockerfile = (DOCKER / "job.Dockerfile").read_text()
    assert pip_install_targets(dockerfile) == ["/src[tf]"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(is_framework(Requirement(r).name) for r in project["optional-dependencies"]["tf"])
    assert "profiler_service.demo.job" in dockerfile and "TF_PROFILER_PORT" in dockerfile


def test_the_sidecar_images_py_spy_may_trace_as_a_non_root_user():
    """The chart runs the sidecar as 65532; py-spy needs CAP_SYS_PTRACE, which such a user gets
    from the file's capability (the chart's pySpy.enabled lets it be raised)."""
    dockerfile = (DOCKER / "sidecar.Dockerfile").read_text()
    setcap = dockerfile.index('setcap cap_sys_ptrace+ep "$(command -v py-spy)"')
    assert dockerfile.index('pip install --no-cache-dir "/src[sidecar]"') < setcap
    assert setcap < dockerfile.index("USER 65532:65532")
    sidecar = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["sidecar"]
    assert any(canonicalize_name(Requirement(r).name) == "py-spy" for r in sidecar)
