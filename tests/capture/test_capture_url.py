"""PROFILER_CAPTURE_URL: the job's profiler writes to a URL, the service fetches from there.

The fetch is checked on fsspec's in-memory filesystem; tests/e2e/test_job_writes_to_a_url.py has
a real job write through TensorFlow's filesystems.
"""

from __future__ import annotations

import fsspec
import pytest
from pydantic import ValidationError

from profiler_service.capture.capture_url import CaptureUrl
from profiler_service.capture.capturer import CaptureFailed
from profiler_service.config import Settings


@pytest.fixture
def memory_url():
    fs = fsspec.filesystem("memory")
    fs.mkdir("/incoming")
    yield fs, "memory://incoming"
    fs.rm("/incoming", recursive=True)


def test_fetch_copies_every_host_and_remove_clears_the_snapshots_prefix(memory_url, tmp_path):
    fs, url = memory_url
    for host in ("w0_6009", "w1_6009"):
        fs.pipe(f"/incoming/s1/plugins/profile/run1/{host}.xplane.pb", host.encode())
    fs.pipe("/incoming/s2/plugins/profile/run1/other.xplane.pb", b"another snapshot")
    capture_url = CaptureUrl(url + "/")
    assert capture_url.logdir("s1") == "memory://incoming/s1"
    capture_url.fetch("s1", tmp_path)
    run = tmp_path / "plugins" / "profile" / "run1"
    assert {p.name: p.read_bytes() for p in run.iterdir()} == {
        "w0_6009.xplane.pb": b"w0_6009",
        "w1_6009.xplane.pb": b"w1_6009",
    }
    capture_url.remove("s1")
    assert not fs.exists("/incoming/s1")
    assert fs.exists("/incoming/s2/plugins/profile/run1/other.xplane.pb")
    capture_url.remove("s1")  # already gone: no error


def test_nothing_written_is_capture_file_missing_naming_the_url(memory_url, tmp_path):
    _, url = memory_url
    with pytest.raises(CaptureFailed) as info:
        CaptureUrl(url).fetch("s9", tmp_path)
    assert info.value.code == "capture_file_missing"
    assert "memory://incoming/s9" in info.value.detail


def test_an_unreadable_url_is_capture_fetch_failed(tmp_path):
    with pytest.raises(CaptureFailed) as info:
        CaptureUrl("no-such-scheme-here://bucket").fetch("s1", tmp_path)
    assert info.value.code == "capture_fetch_failed"
    assert "no-such-scheme-here://bucket/s1" in info.value.detail


def test_capture_url_must_be_a_url_outside_the_mirrored_bucket():
    assert Settings(capture_url="gs://b/incoming/").capture.url == "gs://b/incoming"
    with pytest.raises(ValidationError, match="must be a URL"):
        Settings(capture_url="/local/path")
    with pytest.raises(ValidationError, match="outside store_url"):
        Settings(store_url="gs://b/profiles", capture_url="gs://b/profiles/incoming")
    assert Settings(store_url="gs://b/profiles", capture_url="gs://b/profiles-incoming")
