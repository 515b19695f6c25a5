"""Targets whose workers are found when a capture starts: from TF_CONFIG, or from DNS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import wait_for_status
from pydantic import ValidationError

from profiler_service.capture.capturer import CaptureFailed
from profiler_service.capture.discovery import resolve_workers
from profiler_service.config import CaptureSettings
from profiler_service.targets import Target

CLUSTER = {
    "chief": ["chief-0.trainer:2222"],
    "worker": ["worker-0.trainer:2222", "worker-1.trainer:2222"],
    "ps": ["ps-0.trainer:2222"],
}


def tf_config_file(tmp_path: Path, config: object) -> Path:
    path = tmp_path / "tf_config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return path


def found(spec: str, max_workers: int = 32) -> tuple[list[str], int]:
    target, count = resolve_workers(Target.parse(spec), max_workers)
    assert target.discover is None
    return target.workers, count


# ---- configuration ------------------------------------------------------------------------


def test_discovery_specs_parse_into_where_the_workers_are_found():
    env = Target.parse("trainer=tf-config://").discover
    assert (env.source, env.path, env.tasks) == ("tf-config", None, ["chief", "master", "worker"])
    spec = "trainer=tf-config:///etc/tf/config.json?tasks=worker,ps&port=6009"
    file = Target.parse(spec).discover
    assert (file.path, file.tasks, file.port) == ("/etc/tf/config.json", ["worker", "ps"], 6009)
    dns = Target.parse("dns://trainer-workers.ml.svc:6009")
    assert (dns.name, dns.discover.host, dns.discover.port) == (
        "default",
        "trainer-workers.ml.svc",
        6009,
    )
    targets = CaptureSettings(targets="a=tf-config:// b=dns://h:1").targets
    assert [t.discover.source for t in targets] == [
        "tf-config",
        "dns",
    ]


@pytest.mark.parametrize(
    "spec",
    [
        "dns://workers",  # no port
        "dns://workers:6009?port=1",
        "tf-config://host/path",  # a host where a path belongs
        "tf-config:///p?tasks=worker&when=now",
        "tf-config:///p?port=sixty",
        "tf-config:///p?port=70000",
    ],
)
def test_invalid_discovery_specs_are_rejected_at_startup(spec: str):
    with pytest.raises(ValidationError):
        CaptureSettings(targets=f"trainer={spec}")


def test_a_target_has_fixed_workers_or_a_discovery_not_both():
    with pytest.raises(ValidationError, match="not both"):
        Target(name="x", workers=["h:1"], discover="dns://h:1")


# ---- TF_CONFIG ----------------------------------------------------------------------------


def test_tf_config_gives_the_training_tasks_chief_first(tmp_path):
    path = tf_config_file(tmp_path, {"cluster": CLUSTER, "task": {"type": "worker", "index": 1}})
    assert found(f"tf-config://{path}") == (
        ["chief-0.trainer:2222", "worker-0.trainer:2222", "worker-1.trainer:2222"],
        3,
    )
    assert found(f"tf-config://{path}?tasks=ps") == (["ps-0.trainer:2222"], 1)
    # A job that runs its own profiler server beside the cluster one.
    assert found(f"tf-config://{path}?tasks=worker&port=6009")[0] == [
        "worker-0.trainer:6009",
        "worker-1.trainer:6009",
    ]


def test_tf_config_from_the_services_environment_and_a_sparse_cluster(monkeypatch):
    sparse = {"cluster": {"worker": {"1": "10.0.0.2:2222", "0": "10.0.0.1:2222"}}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(sparse))
    assert found("tf-config://") == (["10.0.0.1:2222", "10.0.0.2:2222"], 2)


def test_more_workers_than_the_limit_captures_the_first_ones(tmp_path):
    workers = [f"w{i}:2222" for i in range(5)]
    path = tf_config_file(tmp_path, {"cluster": {"worker": workers}})
    assert found(f"tf-config://{path}", max_workers=2) == (["w0:2222", "w1:2222"], 5)
    # A fixed list is the operator's own choice: never cut.
    assert found(",".join(workers), max_workers=2) == (workers, 5)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (None, "cannot read"),
        ("{not json", "TF_CONFIG is not JSON"),
        ({"task": {"type": "worker"}}, 'no "cluster"'),
        ({"cluster": {"ps": ["p:1"]}}, "no chief/master/worker tasks (has: ps)"),
        ({"cluster": {"worker": ["no-port"]}}, "not a profiler server address"),
    ],
)
def test_a_tf_config_that_cannot_be_used_fails_the_capture_with_a_reason(tmp_path, config, says):
    path = tmp_path / "missing.json" if config is None else tf_config_file(tmp_path, config)
    with pytest.raises(CaptureFailed) as info:
        found(f"trainer=tf-config://{path}")
    assert info.value.code == "target_discovery_failed"
    assert says in info.value.detail
    assert "'trainer'" in info.value.detail and str(path) in info.value.detail


def test_an_unset_tf_config_variable_is_named(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(CaptureFailed, match="TF_CONFIG variable is unset"):
        found("tf-config://")


# ---- DNS ----------------------------------------------------------------------------------


def test_dns_gives_every_address_of_the_name_with_the_port():
    # The real resolver: localhost is 127.0.0.1 (and perhaps ::1, which is then left out, so a
    # dual-stack worker is not captured twice).
    assert found("dns://localhost:6009") == (["127.0.0.1:6009"], 1)


def test_a_name_that_does_not_resolve_fails_the_capture():
    with pytest.raises(CaptureFailed) as info:
        found("dns://no-such-worker.invalid:6009")
    assert info.value.code == "target_discovery_failed"
    assert "no-such-worker.invalid does not resolve" in info.value.detail


# ---- through the service ------------------------------------------------------------------


def test_a_target_found_by_dns_is_captured(input_bound_job, service_factory):
    port = input_bound_job.ready["profiler_port"]
    service = service_factory([f"trainer=dns://localhost:{port}"])
    with service.client() as client:
        assert client.get("/readyz").json()["checks"]["target:trainer"] == "ok"
        body = client.post("/profile", params={"duration": "1s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    assert body["workers"] == [f"127.0.0.1:{port}"]
    assert body["hosts"] == [f"127.0.0.1_{port}"]


def test_a_failed_discovery_is_a_failed_snapshot_and_the_service_keeps_serving(
    tmp_path, service_factory
):
    missing = tmp_path / "tf_config.json"
    service = service_factory([f"trainer=tf-config://{missing}"])
    with service.client() as client:
        readiness = client.get("/readyz")
        assert readiness.status_code == 503
        assert str(missing) in readiness.json()["checks"]["target:trainer"]
        started = client.post("/profile", params={"duration": "1s"})
        assert started.status_code == 202
        body = wait_for_status(client, started.json()["id"], {"failed"})
        assert body["error"]["code"] == "target_discovery_failed"
        assert "cannot read" in body["error"]["detail"]
        assert body["workers"] == []
        assert client.get("/healthz").status_code == 200
        assert client.get(f"/profiles/{body['id']}").json()["status"] == "failed"
