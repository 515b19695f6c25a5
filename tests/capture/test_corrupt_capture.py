"""A corrupt or truncated capture fails analysis with XProf's reason, and its file is kept.

The capture stage is a stand-in that writes bytes where the profiler would (the profiler itself
only writes whole files); everything after it is real: store, controller, XProf's converters.
"""

from __future__ import annotations

import random

import pytest
from fakes import WritesBytes

from profiler_service.capture.controller import CaptureRequest


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (random.Random(5000).randbytes(5000), "Can't parse"),  # fixed: some bytes read short
        # A valid XSpace starts with field tags; cut short, XProf reads past the end.
        (b"\x0a\xff\xff\x7f" + b"\x00" * 100, ""),
    ],
)
def test_unreadable_capture_fails_analysis_and_keeps_the_file(make_service, payload, reason):
    service = make_service(WritesBytes(payload))
    snapshot = service.controller.start(CaptureRequest(duration_s=0.1))
    assert service.controller.wait(snapshot.id, 120)
    done = service.store.get(snapshot.id)
    assert done.status == "failed"
    assert done.error.code == "analysis_failed"
    assert "XProf" in done.error.detail and reason in done.error.detail
    kept = service.store.file_path(snapshot.id, "worker-0.xplane.pb")
    assert kept.read_bytes() == payload
    assert not (service.store.root / "plugins" / "profile" / snapshot.id).exists()


def test_empty_capture_file_is_a_capture_failure_not_a_snapshot(make_service):
    service = make_service(WritesBytes(b""))
    snapshot = service.controller.start(CaptureRequest(duration_s=0.1))
    assert service.controller.wait(snapshot.id, 60)
    done = service.store.get(snapshot.id)
    assert (done.status, done.error.code) == ("failed", "capture_empty")
    assert "2 GB" in done.error.detail
    assert done.files == []
