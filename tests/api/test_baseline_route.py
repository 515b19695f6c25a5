"""The runbook's last step, as docs/alerts.md writes it: after the fix, the good snapshot becomes
its target's baseline, `GET /baselines` lists it and `/compare` uses it. The requests are read
from the runbook itself, so a runbook that names the wrong request (pinning sets no baseline)
fails here. Real app, real store, real analysis of a recorded capture."""

from __future__ import annotations

import re
from pathlib import Path

from fakes import WritesBytes
from fastapi.testclient import TestClient
from helpers import RECORDED_CAPTURE

from profiler_service.api.app import create_app

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


def runbook_step(title: str) -> str:
    """The text of the runbook's numbered step whose bold title starts with `title`."""
    text = RUNBOOK.read_text()
    runbook = text[text.index("## Runbook") :]
    step = re.search(rf"^\d+\. \*\*{re.escape(title)}.*?(?=^\d+\. |^#|\Z)", runbook, re.S | re.M)
    assert step, f"the runbook has no step {title!r}"
    return step.group(0)


def test_the_runbook_s_baseline_step_sets_a_baseline_that_compare_uses(make_service):
    step = runbook_step("After the fix")
    # The first request the step names is the one that sets the baseline.
    method, path = re.search(r"`(PUT|POST) (/profiles/<id>/\w+)`", step).groups()
    service = make_service(WritesBytes(RECORDED_CAPTURE.read_bytes()))
    with TestClient(create_app(service)) as client:
        good = client.post("/profile", params={"duration": "100ms", "wait": "true"}).json()
        assert good["status"] == "ready", good.get("error")
        assert client.get(f"/profiles/{good['id']}/compare").json()["error"] == "no_baseline"

        answer = client.request(method, path.replace("<id>", good["id"]))
        assert answer.status_code == 200, answer.text
        assert client.get("/baselines").json() == {f"target:{good['target']}": good["id"]}

        later = client.post("/profile", params={"duration": "100ms", "wait": "true"}).json()
        compared = client.get(f"/profiles/{later['id']}/compare")
        assert compared.status_code == 200, compared.text
        assert (compared.json()["base_id"], compared.json()["head_id"]) == (good["id"], later["id"])


def test_setting_a_baseline_answers_the_record_not_the_snapshot(make_service):
    service = make_service(WritesBytes(RECORDED_CAPTURE.read_bytes()))
    with TestClient(create_app(service)) as client:
        good = client.post("/profile", params={"duration": "100ms", "wait": "true"}).json()
        answer = client.put(f"/profiles/{good['id']}/baseline")
        labelled = client.put(f"/profiles/{good['id']}/baseline", params={"label": "model=v7"})
        record = answer.json()
        # What it points at, and where to go next
        assert record == {
            "key": f"target:{good['target']}",
            "snapshot_id": good["id"],
            "target": good["target"],
            "pinned": True,
            "compared_by_default": True,
            "links": {
                "snapshot": f"/profiles/{good['id']}",
                "report": f"/profiles/{good['id']}/report",
                "baselines": "/baselines",
            },
        }
        assert client.get(record["links"]["snapshot"]).json()["pinned"] is True
        assert client.get(record["links"]["report"]).status_code == 200
        whole = client.get(record["links"]["snapshot"]).content
    # Measured: 297 bytes, where the snapshot it used to answer with is 31 KB.
    assert len(answer.content) < 500 and 20 * len(answer.content) < len(whole)
    assert labelled.json()["key"] == "label:model=v7"
    assert labelled.json()["compared_by_default"] is False
