"""Tenants on the hub, with real processes: one `profiler-service hub` with a tokens file over a
bucket, and two `profiler-service serve` sidecars (team-a, team-b) registered with it.

The leak check walks the hub app's own route table, so a route added later is checked too: each
route is asked by team-a's tokens about team-b's snapshot, sidecar, namespace, target, pod and
workload, and again about made-up ones of the same shape (team-z's, which exist nowhere). The two
answers must be the same, once the names are swapped: another team's things answer exactly as
things that do not exist, so no answer tells that they exist. And no answer to the made-up
question may hold any of team-b's names.

Team-a also runs two jobs in one namespace whose targets share the name `trainer` (what the chart
names every target): their workloads keep them apart on the fleet page, in the filters and in the
metrics.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import httpx
import pytest
from fastapi.dependencies.models import Dependant
from fleet_samples import XPLANE, fleet_snapshot, put, sidecar_env
from helpers import api_routes, start_hub, start_service
from s3_server import wait_until

from profiler_service.analysis.models import Severity
from profiler_service.api.auth import Scope
from profiler_service.hub.app import create_hub_app
from profiler_service.store.bucket_client import BucketClient

WEBHOOK_TOKEN = "am-webhook-token"
TEAM_A = "team-a-reads-and-captures-0123"
TEAM_A_VIEWER = "team-a-only-reads-0123456789"
TEAM_B = "team-b-reads-and-captures-0123"
ADMIN = "platform-sees-everything-0123"
TEAM_C = "team-c-arrives-later-01234567"
TEAM_A_CI = "team-a-only-captures-0123456"
NOWHERE = "grpc://127.0.0.1:1"


def token_file(path: Path, *, with_team_a: bool = True, with_team_c: bool = False) -> None:
    """Written as the kubelet updates a mounted Secret: a new file swapped in whole."""
    tokens = [
        {"name": "team-b", "token": TEAM_B, "read": ["team-b"], "capture": ["team-b"]},
        {"name": "team-a-viewers", "token": TEAM_A_VIEWER, "read": ["team-a"]},
        {"name": "team-a-ci", "token": TEAM_A_CI, "capture": ["team-a"]},
        {"name": "platform", "token": ADMIN, "read": ["*"], "capture": ["*"]},
    ]
    if with_team_a:  # stored as its SHA-256, not the token itself
        digest = hashlib.sha256(TEAM_A.encode()).hexdigest()
        tokens.append({"name": "team-a", "sha256": digest, "read": ["team-a"],
                       "capture": ["team-a"]})  # fmt: skip
    if with_team_c:
        tokens.append({"name": "team-c", "token": TEAM_C, "read": ["team-c", "team-a"]})
    staged = path.with_suffix(".new")
    staged.write_text(json.dumps({"tokens": tokens}))
    os.replace(staged, path)


def snapshots():
    """Team-a: two jobs (workloads bert and resnet) whose targets are both `trainer`; team-b:
    one job; and one snapshot of no namespace, which only the admin token reaches."""
    out = []
    for k in range(3):
        out.append(fleet_snapshot(10 + k, namespace="team-a", target="trainer", workload="bert",
                                  pod="bert-0", minutes_ago=30 - k, step_ms=100,
                                  with_file=k == 0))  # fmt: skip
        out.append(fleet_snapshot(20 + k, namespace="team-a", target="trainer", workload="resnet",
                                  pod="resnet-0", minutes_ago=29 - k,
                                  step_ms=200 + 30 * k))  # fmt: skip
        out.append(fleet_snapshot(30 + k, namespace="team-b", target="ranker",
                                  workload="search-ranker", pod="ranker-b-0", minutes_ago=28 - k,
                                  rules=(("input_bound", Severity.WARNING),),
                                  with_file=k == 0))  # fmt: skip
    out.append(fleet_snapshot(40, namespace=None, target="orphan", minutes_ago=5))
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("tenants")
    bucket = root / "bucket"
    bucket.mkdir()
    mirror = BucketClient(f"file://{bucket}", {})
    taken = snapshots()
    for s in taken:
        put(mirror, s, root / "files" / s.id)
    tokens = root / "tokens.json"
    token_file(tokens)
    hub = start_hub(
        root / "hub",
        {
            "PROFILER_STORE_URL": f"file://{bucket}",
            "PROFILER_HUB_TOKEN": "fleet-secret",
            "PROFILER_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "PROFILER_HUB_SYNC_INTERVAL_S": "0.5",
            "PROFILER_HUB_SIDECAR_TTL_S": "30",
            "PROFILER_TOKENS_FILE": str(tokens),
        },
    )
    sidecars = {
        "a": start_service(root / "a", [f"trainer={NOWHERE}"],
                           sidecar_env(hub.url, "trainer-a-0", "team-a", "bert")),
        "b": start_service(root / "b", [f"ranker={NOWHERE}"],
                           sidecar_env(hub.url, "ranker-b-0", "team-b", "search-ranker")),
    }  # fmt: skip
    admin = hub.client(headers={"Authorization": f"Bearer {ADMIN}"})
    wait_until(lambda: admin.get("/sidecars").json()["count"] == 2, 30, "two registrations")
    wait_until(lambda: admin.get("/profiles").json()["count"] == len(taken), 30, "the sync")
    # One alert for each team, through the fleet webhook with the receiver's credentials.
    alerts = {"version": "4", "alerts": [
        {"status": "firing", "labels": {"alertname": "Slow", "namespace": ns, "pod": pod},
         "fingerprint": f"fp-{pod}"}
        for ns, pod in (("team-a", "trainer-a-0"), ("team-b", "ranker-b-0"))
    ]}  # fmt: skip
    routed = httpx.post(f"{hub.url}/webhooks/alertmanager", json=alerts,
                        headers={"Authorization": f"Bearer {WEBHOOK_TOKEN}"}).json()  # fmt: skip
    yield hub, sidecars, taken, tokens, routed
    admin.close()
    for s in sidecars.values():
        s.stop()
    hub.stop()


def as_(hub, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return hub.client(headers=headers)


def test_alerts_through_the_fleet_webhook_keep_working(fleet):
    hub, sidecars, _, _, routed = fleet
    outcomes = {o["sidecar"]: o for o in routed["alerts"]}
    assert outcomes["team-a/trainer-a-0"]["outcome"] == "captured", routed
    assert outcomes["team-b/ranker-b-0"]["outcome"] == "captured", routed
    # The sidecar records its workload in the snapshot: the job, whatever its target is named.
    with sidecars["b"].client() as b:
        taken = b.get(f"/profiles/{outcomes['team-b/ranker-b-0']['snapshot_id']}").json()
    assert taken["workload"] == "search-ranker" and taken["namespace"] == "team-b"
    with as_(hub, TEAM_A) as a:
        mine = a.get("/webhooks/alerts").json()
    assert [o["sidecar"] for o in mine["data"]] == ["team-a/trainer-a-0"]
    assert mine["counts"] == {"alertmanager": {"captured": 1}}


def sweep_requests(snapshot_id: str, baseline: str, values: dict[str, str]):
    """(method, url, query) for every route of the hub app, its path and query parameters
    filled from `values`: a new route is in the sweep without anyone adding it."""
    for route in api_routes(create_hub_app(None).routes):  # type: ignore[arg-type]
        names = query_names(route.dependant)
        query = {name: values[name] for name in names if name in values}
        if "baseline" in query:
            query["baseline"] = baseline
        path = route.path_format.replace("{snapshot_id}", snapshot_id)
        name = "host.xplane.pb" if "/files/" in path else values["sidecar"]
        path = path.replace("{name}", name)
        for method in sorted(route.methods):
            yield method, path, query


def query_names(dependant: Dependant) -> set[str]:
    """The query parameters of a route and of every dependency it declares."""
    names = {p.name for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= query_names(sub)
    return names


def masked(text: str) -> str:
    """Numbers (times, durations, counts of syncs) differ from one call to the next."""
    return re.sub(r"[0-9][0-9.e+-]*", "#", text)


@pytest.mark.parametrize("token", [TEAM_A, TEAM_A_VIEWER], ids=["read-capture", "read-only"])
def test_every_route_answers_about_another_team_as_about_nothing(fleet, token):
    hub, _, taken, _, _ = fleet
    b_ids = [s.id for s in taken if s.namespace == "team-b"]
    own = next(s.id for s in taken if s.namespace == "team-a" and s.files)
    theirs = {
        "namespace": "team-b", "target": "ranker", "pod": "ranker-b-0",
        "workload": "search-ranker", "sidecar": "ranker-b-0",
    }  # fmt: skip
    made_up = {
        "namespace": "team-z", "target": "zanker", "pod": "zanker-z-0",
        "workload": "zearch-zanker", "sidecar": "zanker-z-0",
    }  # fmt: skip
    fake_ids = [i.replace("ranker", "zanker")[:-3] + "fff" for i in b_ids]
    swap = sorted(
        [*zip(b_ids, fake_ids, strict=True), *((theirs[k], made_up[k]) for k in theirs)],
        key=lambda pair: -len(pair[0]),
    )
    never = [*b_ids, "team-b", "ranker", "search-ranker", "orphan", "sidecar-own-token"]
    checked = set()
    with as_(hub, token) as client:
        for path_id in (b_ids[0], own):  # their snapshot; and one's own, against theirs
            pairs = zip(
                sweep_requests(path_id, b_ids[1], theirs),
                sweep_requests(path_id if path_id == own else fake_ids[0], fake_ids[1], made_up),
                strict=True,
            )
            for (method, path, query), (_, fake_path, fake_query) in pairs:
                real = client.request(method, path, params=query)
                fake = client.request(method, fake_path, params=fake_query)
                said = real.text
                for theirs_value, fake_value in swap:
                    said = said.replace(theirs_value, fake_value)
                where = f"{method} {path} {query}"
                assert real.status_code == fake.status_code, (where, real.text, fake.text)
                assert masked(said) == masked(fake.text), where
                assert not [n for n in never if n in fake.text], (where, fake.text[:2000])
                assert real.status_code < 500, (where, real.text)
                checked.add((method, path.replace(path_id, "{id}")))
    assert ("GET", "/profiles/{id}/files/host.xplane.pb") in checked
    assert len({m for m, _ in checked}) >= 4  # GET, POST, PUT, DELETE


def test_a_team_reads_its_own_namespaces_whole(fleet):
    hub, _, taken, _, _ = fleet
    mine = sorted((s for s in taken if s.namespace == "team-a"), key=lambda s: s.created_at)
    with as_(hub, TEAM_A_VIEWER) as a:
        listing = a.get("/profiles", params={"limit": 500}).json()
        assert sorted(s["id"] for s in listing["data"]) == sorted(s.id for s in mine)
        assert listing["count"] == 6
        with_file = next(s for s in mine if s.files)
        assert a.get(f"/profiles/{with_file.id}/report").status_code == 200
        download = a.get(f"/profiles/{with_file.id}/files/host.xplane.pb")
        assert download.status_code == 200 and download.content == XPLANE
        assert [s["name"] for s in a.get("/sidecars").json()["data"]] == ["trainer-a-0"]
        metrics = a.get("/metrics").text
        assert 'profiler_fleet_sidecars{namespace="team-a"} 1.0' in metrics
        assert "profiler_fleet_syncs_total" in metrics  # the hub's own: no tenant's names
        assert 'namespace="team-b"' not in metrics and 'namespace=""' not in metrics
    with as_(hub, ADMIN) as admin:
        assert admin.get("/profiles").json()["count"] == len(taken)
        assert 'data-job="team-b/search-ranker/ranker"' in admin.get("/fleet").text
        assert 'namespace="team-b"' in admin.get("/metrics").text


def test_reading_needs_a_token_once_there_are_tenants(fleet):
    hub = fleet[0]
    for path in ("/profiles", "/fleet", "/metrics", "/sidecars", "/webhooks/alerts"):
        anonymous = httpx.get(f"{hub.url}{path}")
        assert anonymous.status_code == 401, path
        assert anonymous.headers["WWW-Authenticate"] == "Bearer"
        # The webhook token posts alerts; it reads nothing.
        hook = {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}
        receiver = httpx.get(f"{hub.url}{path}", headers=hook)
        assert receiver.status_code == 403 and receiver.json()["error"] == "forbidden", path
    assert httpx.get(f"{hub.url}/healthz").status_code == 200


def test_a_team_captures_only_its_own_jobs(fleet):
    hub = fleet[0]
    with as_(hub, TEAM_A) as a:
        started = a.post("/profile", params={"target": "trainer", "duration": "200ms"})
        assert started.status_code in (202, 409), started.text
        assert started.headers["x-profiler-sidecar"] == "team-a/trainer-a-0"
    with as_(hub, TEAM_B) as b:
        refused = b.post("/profile", params={"target": "trainer", "namespace": "team-a"})
        assert refused.status_code == 404 and refused.json()["error"] == "no_sidecar"
    with as_(hub, TEAM_A_VIEWER) as viewer:
        assert viewer.post("/profile", params={"target": "trainer"}).status_code == 403


def test_another_teams_snapshot_files_and_report_urls_are_not_found(fleet):
    """The URLs a listing links to (`links.files`, `links.report`): team-b's, asked by team-a's
    token, are 404 with the sentence an id that never existed gets; the admin downloads them."""
    hub, _, taken, _, _ = fleet
    theirs = next(s for s in taken if s.namespace == "team-b" and s.files)
    with as_(hub, ADMIN) as admin:
        links = admin.get(f"/profiles/{theirs.id}").json()["links"]
        assert admin.get(links["files"]["host.xplane.pb"]).content == XPLANE
    urls = [links["self"], links["report"], links["files"]["host.xplane.pb"]]
    own = next(s.id for s in taken if s.namespace == "team-a")
    urls.append(f"/profiles/{own}/report?baseline={theirs.id}")
    for token in (TEAM_A, TEAM_A_VIEWER):
        with as_(hub, token) as a:
            for url in urls:
                answer = a.get(url)
                assert answer.status_code == 404, (url, answer.text)
                absent = {
                    "error": "snapshot_not_found",
                    "detail": f"no snapshot with id {theirs.id!r}",
                }
                assert answer.json() == absent, url
            listed = a.get("/profiles", params={"limit": 500}).text
            assert theirs.id not in listed and "team-b" not in listed


def read_routes() -> list[tuple[str, str]]:
    """(method, path) of every hub route that needs the `read` scope, from the route table."""

    def scopes(dependant: Dependant) -> set:
        found = {getattr(sub.call, "scope", None) for sub in dependant.dependencies}
        for sub in dependant.dependencies:
            found |= scopes(sub)
        return found

    return [
        (method, route.path_format)
        for route in api_routes(create_hub_app(None).routes)  # type: ignore[arg-type]
        if Scope.READ in scopes(route.dependant)
        for method in sorted(route.methods)
    ]


def test_a_token_that_only_captures_reads_nothing(fleet):
    hub, _, taken, _, _ = fleet
    own = next(s for s in taken if s.namespace == "team-a" and s.files)
    routes = read_routes()
    assert {("GET", "/profiles/{snapshot_id}/files/{name}"), ("GET", "/fleet"),
            ("GET", "/metrics"), ("GET", "/sidecars")} <= set(routes)  # fmt: skip
    with as_(hub, TEAM_A_CI) as ci:
        for method, path in routes:
            url = path.replace("{snapshot_id}", own.id).replace("{name}", "host.xplane.pb")
            answer = ci.request(method, url)
            assert answer.status_code == 403, (method, url, answer.text)
            assert answer.json()["error"] == "forbidden"

        # It captures its namespace's jobs; the answer is the snapshot's head, never what the
        # analysis found (the summary, findings, lead-up), even when it waits for the analysis.
        def capture(client: httpx.Client) -> tuple[httpx.Response] | None:
            answer = client.post("/profile", params={"target": "trainer", "duration": "100ms",
                                                     "wait": "true"})  # fmt: skip
            return None if answer.status_code == 409 else (answer,)  # another one running

        (started,) = wait_until(lambda: capture(ci), 30, "a capture the ci token starts")
        # Nothing listens at the sidecar's target: the failure in the error shape (502), with
        # the snapshot in it.
        assert started.status_code == 502, started.text
        assert started.headers["x-profiler-sidecar"] == "team-a/trainer-a-0"
        assert started.json()["error"] == "target_unreachable"
        head = started.json()["snapshot"]
        assert head["namespace"] == "team-a" and head["status"] == "failed"
        assert not {"summary", "findings", "lead_up"} & head.keys(), head.keys()
        assert ci.get(head["links"]["self"]).status_code == 403
        assert ci.post("/profile", params={"target": "ranker", "namespace": "team-b"}).json()[
            "error"] == "no_sidecar"  # fmt: skip
    with as_(hub, TEAM_A) as a:  # a token that also reads gets the whole answer
        (whole,) = wait_until(lambda: capture(a), 30, "a capture the team's token starts")
        assert whole.status_code == 502, whole.text
        assert {"summary", "findings", "lead_up"} <= whole.json()["snapshot"].keys()


def test_two_jobs_of_one_namespace_are_two_rows_and_two_series(fleet):
    hub = fleet[0]
    with as_(hub, TEAM_A) as a:
        page = a.get("/fleet").text
        assert 'data-job="team-a/bert/trainer"' in page
        assert 'data-job="team-a/resnet/trainer"' in page
        resnet = page.split('data-job="team-a/resnet/trainer"')[1].split("</tr>")[0]
        assert "+30 % regression" in resnet  # 200 ms -> 260 ms, its own baseline
        bert = page.split('data-job="team-a/bert/trainer"')[1].split("</tr>")[0]
        assert "+0 %" in bert
        assert a.get("/profiles", params={"workload": "resnet"}).json()["count"] == 3
        metrics = a.get("/metrics").text
        for workload, seconds in (("bert", "0.1"), ("resnet", "0.26")):
            labels = f'namespace="team-a",target="trainer",workload="{workload}"'
            assert f"profiler_fleet_step_time_seconds{{{labels}}} {seconds}" in metrics


def test_the_tokens_file_is_reloaded_without_a_restart(fleet):
    hub, _, _, tokens, _ = fleet
    with as_(hub, TEAM_C) as c:
        assert c.get("/profiles").status_code == 403  # not yet a token
        token_file(tokens, with_team_a=False, with_team_c=True)
        wait_until(lambda: c.get("/profiles").status_code == 200, 15, "the new token")
        assert c.get("/profiles").json()["count"] == 6  # team-a's (team-c has none)
    with as_(hub, TEAM_A) as a:
        assert a.get("/profiles").status_code == 403  # its token was removed
    # A broken file keeps the tokens in force: nobody is locked out by a bad edit.
    tokens.write_text("{not json")
    with as_(hub, TEAM_C) as c:
        wait_until(lambda: "the previous tokens stay in force" in hub.log.read_text(), 15,
                   "the error in the log")  # fmt: skip
        assert c.get("/profiles").status_code == 200
