"""Many sidecars, one bucket: real service processes, a real job, a real S3 API on loopback.

Two `profiler-service serve` processes with their own local stores capture the same real job and
mirror to one bucket (moto's standalone S3 server); a third with no targets lists both snapshots,
reads their summaries and downloads a capture file from the bucket. A fourth captures while the
bucket is down and uploads once it is back. XProf reads a `file://` mirror (XProf 2.24 reads only
local paths and gs://, see docs/deployment.md, "Many sidecars, one bucket").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from helpers import QUIET_TF, free_port, xprof_server
from s3_server import S3Server, wait_until

BUCKET = "fleet-profiles"


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    server = S3Server(free_port()).start(tmp_path_factory.mktemp("moto") / "moto.log")
    server.create_bucket(BUCKET)
    yield server
    server.stop()


def mirror_env(url: str, options: dict) -> dict[str, str]:
    return {
        "PROFILER_STORE_URL": url,
        "PROFILER_STORE_OPTIONS": json.dumps(options),
        "PROFILER_STORE_REFRESH_S": "0",
        "PROFILER_STORE_RETRY_MAX_S": "1",
    }


def metric(client: httpx.Client, name: str) -> float | None:
    match = re.search(rf"^{name} (\S+)$", client.get("/metrics").text, re.MULTILINE)
    return float(match.group(1)) if match else None


def capture(client: httpx.Client) -> dict:
    body = client.post("/profile", params={"duration": "500ms", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")
    return body


def test_two_sidecars_write_one_bucket_and_a_third_reads_both(
    input_bound_job, service_factory, s3, tmp_path
):
    url = f"s3://{BUCKET}/team-a"
    env = mirror_env(url, s3.options)
    sidecars = [
        service_factory([input_bound_job.address], env, store=tmp_path / name)
        for name in ("sidecar-a", "sidecar-b")
    ]
    snapshots = []
    for sidecar in sidecars:  # one after the other: the job has one profiler session at a time
        with sidecar.client() as client:
            snapshots.append(capture(client))
            wait_until(
                lambda c=client: metric(c, "profiler_store_upload_pending") == 0, 60, "upload"
            )
    ids = [s["id"] for s in snapshots]
    assert len(set(ids)) == 2

    # The bucket holds both in the XProf layout, snapshot.json beside the capture files.
    fs = s3.fs()
    for snapshot in snapshots:
        names = {
            p.rsplit("/", 1)[1]
            for p in fs.find(f"{BUCKET}/team-a/plugins/profile/{snapshot['id']}")
        }
        assert names == {"snapshot.json"} | {f["name"] for f in snapshot["files"]}

    central = service_factory([], env, store=tmp_path / "central")
    with central.client() as client:
        # Listing answers from the index at once; the bucket's listing lands in the background.
        listing = wait_until(
            lambda: (body := client.get("/profiles").json())["count"] == 2 and body,
            30,
            "the first listing of the bucket",
        )
        # Newest first by creation time: two ids of the same second do not sort by time.
        newest_first = sorted(snapshots, key=lambda s: s["created_at"], reverse=True)
        assert [s["id"] for s in listing["data"]] == [s["id"] for s in newest_first]
        for snapshot in snapshots:
            body = client.get(f"/profiles/{snapshot['id']}").json()
            assert body["status"] == "ready"
            assert body["summary"] == snapshot["summary"]
            assert body["findings"][0]["rule"] == "input_bound"
            assert client.get(f"/profiles/{snapshot['id']}/report").status_code == 200
        first = snapshots[0]
        name = first["files"][0]["name"]
        download = client.get(f"/profiles/{first['id']}/files/{name}")
        assert download.status_code == 200
        local = tmp_path / "sidecar-a" / "plugins" / "profile" / first["id"] / name
        assert download.content == local.read_bytes()
        assert int(download.headers["content-length"]) == local.stat().st_size
        assert not (tmp_path / "central" / "plugins" / "profile" / first["id"]).exists()
        assert client.get(f"/profiles/{first['id']}/files/..%2Fsnapshot.json").status_code == 404
        # This instance exports no store series for snapshots other sidecars took.
        assert metric(client, 'profiler_store_snapshots{status="ready"}') == 0

        # Deleting through any instance deletes in the bucket: gone for every reader.
        assert client.delete(f"/profiles/{first['id']}").status_code == 204
        assert first["id"] not in [s["id"] for s in client.get("/profiles").json()["data"]]
    doc = f"{BUCKET}/team-a/plugins/profile/{first['id']}/snapshot.json"
    wait_until(lambda: not fs.exists(doc), 30, "the delete in the bucket")
    with sidecars[1].client() as client:
        wait_until(
            lambda: [s["id"] for s in client.get("/profiles").json()["data"]] == [ids[1]],
            30,
            "the other sidecar's listing",
        )


def test_a_capture_while_the_bucket_is_down_is_kept_and_uploaded_later(
    input_bound_job, service_factory, tmp_path
):
    late = S3Server(free_port())  # not started: the bucket is down
    env = mirror_env(f"s3://{BUCKET}/team-b", late.fast_fail_options)
    sidecar = service_factory([input_bound_job.address], env, store=tmp_path / "sidecar")
    with sidecar.client() as client:
        snapshot = capture(client)
        run_dir = tmp_path / "sidecar" / "plugins" / "profile" / snapshot["id"]
        assert (run_dir / snapshot["files"][0]["name"]).is_file()
        wait_until(
            lambda: (metric(client, "profiler_store_upload_failures_total") or 0) >= 1,
            60,
            "a failed upload",
        )
        assert metric(client, "profiler_store_upload_pending") == 1
        assert client.get(f"/profiles/{snapshot['id']}").json()["status"] == "ready"

        late.start(tmp_path / "moto-late.log")
        try:
            late.create_bucket(BUCKET)
            wait_until(
                lambda: metric(client, "profiler_store_upload_pending") == 0, 60, "the upload"
            )
            prefix = f"{BUCKET}/team-b/plugins/profile/{snapshot['id']}"
            assert late.fs().exists(f"{prefix}/snapshot.json")
        finally:
            late.stop()
    assert "failed (1 pending" in sidecar.log.read_text()


def test_xprof_discovers_the_runs_of_a_mirror(input_bound_job, service_factory, tmp_path):
    shared = tmp_path / "bucket"
    env = mirror_env(f"file://{shared}", {})
    sidecar = service_factory([input_bound_job.address], env, store=tmp_path / "sidecar")
    with sidecar.client() as client:
        snapshot = capture(client)
        wait_until(lambda: metric(client, "profiler_store_upload_pending") == 0, 60, "the copy")

    with xprof_server(shared) as xprof:
        assert xprof("runs") == [snapshot["id"]]
        assert "overview_page" in xprof("run_tools", {"run": snapshot["id"]})


def test_tf_2_21_cannot_write_s3_itself_so_the_capture_goes_through_the_shared_volume():
    """docs/deployment.md, "where the capture is written": TF's own filesystems have gs://, not s3://."""
    probe = (
        "import tensorflow as tf\n"
        "try:\n"
        "    tf.io.gfile.makedirs('s3://bucket/prefix/plugins/profile/run')\n"
        "except tf.errors.UnimplementedError as exc:\n"
        "    print('UNIMPLEMENTED', exc)\n"
        "print('GS', 'gs' in tf.io.gfile.get_registered_schemes())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **QUIET_TF},
    ).stdout
    assert "UNIMPLEMENTED File system scheme 's3' not implemented" in out
    assert "GS True" in out
