"""Proportions are shares (0-1, `_share`); the fields that held a percentage (0-100, `_pct`)
before 0.2.0 are still read in their old spelling: a snapshot the 0.1.0 release wrote
(tests/fixtures/releases/) loads with the right shares, and is written back in the new names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler_service.analysis.findings import estimate
from profiler_service.analysis.findings.device import DeviceIdleEvidence
from profiler_service.analysis.models import (
    Finding,
    GpuDevice,
    HostActivity,
    InputPipeline,
    Severity,
    StepTime,
    Summary,
    Utilisation,
)
from profiler_service.analysis.renamed_fields import RENAMED, SINCE, percent_to_share
from profiler_service.exporters.text_report import format_summary
from profiler_service.models import Snapshot

RELEASES = Path(__file__).resolve().parents[1] / "fixtures" / "releases"
OLD = RELEASES / "0.1.0/store/plugins/profile/20261201-120001-trainer-000000000001/snapshot.json"


def test_a_snapshot_written_by_0_1_0_loads_its_percentages_as_shares():
    doc = json.loads(OLD.read_text())
    old_gpu = doc["summary"]["gpu"]["devices"][0]
    assert old_gpu["busy_pct"] == 7.1  # the fixture is in the old spelling
    snapshot = Snapshot.model_validate(doc)
    summary = snapshot.summary
    device = summary.gpu.devices[0]
    assert (device.busy_share, device.kernel_share, device.idle_share) == (0.071, 0.069, 0.929)
    assert device.idle_while_host_share == {
        "input": 0.088,
        "transfer": 0.018,
        "tf_ops": 0.211,
        "python": 0.003,
        "tf_data": 0.006,
        "nothing": 0.603,
    }
    assert device.busy_timeline_share == [
        pytest.approx(v / 100) for v in old_gpu["busy_timeline_pct"]
    ]
    assert summary.gpu.hosts[0].busy_share["tf_ops"] == 0.223
    assert summary.gpu.idle_share == 0.929
    assert summary.gpu.idle_while(HostActivity.TF_OPS) == 0.211
    assert summary.input_pipeline.input_share == 0.0
    assert summary.utilisation.device_idle_share is None  # null then, null now
    assert summary.device_idle_share == 0.929  # the GPUs' own, as XProf gave none
    # Shown as before: the percentage is the report's.
    assert any("idle 92.9% of the capture" in line for line in format_summary(summary))
    # The findings' evidence too, whether or not its model reads it.
    evidence = {f.rule: f.evidence for f in snapshot.findings}
    assert evidence["device_idle"]["device_idle_share"] == 0.929
    assert evidence["device_idle"]["idle_while_host_share"]["tf_ops"] == 0.211
    assert evidence["input_bound"]["input_share"] == 0.088
    assert evidence["kernel_launch_bound"]["gpu_busy_share"] == 0.071
    assert evidence["kernel_launch_bound"]["idle_while_host_ops_share"] == 0.211
    assert evidence["mixed_precision"]["kernel_share"] == 0.069
    assert evidence["mixed_precision"]["device_compute_32bit_pct"] == 100.0  # XProf's, as given
    idle = next(f for f in snapshot.findings if f.rule == "device_idle")
    assert DeviceIdleEvidence.model_validate(idle.evidence).device_idle_share == 0.929
    # Written back in the new names only.
    written = json.dumps(snapshot.model_dump(mode="json"))
    for renamed in RENAMED:
        if renamed.model != "HostSummary":  # a capture of one host has none
            assert f'"{renamed.new}"' in written, renamed
        assert f'"{renamed.old}"' not in written, renamed
    again = Snapshot.model_validate_json(written)
    assert (again.summary, again.findings) == (summary, snapshot.findings)


def test_either_spelling_reads_the_same_and_the_new_one_wins():
    assert InputPipeline(input_share_pct=8.8) == InputPipeline(input_share=0.088)
    assert Utilisation.model_validate({"device_idle_pct": 92.9}).device_idle_share == 0.929
    both = GpuDevice.model_validate({"device": "g", "busy_pct": 50.0, "busy_share": 0.25})
    assert both.busy_share == 0.25
    assert percent_to_share(None) is None


def test_a_gpu_imbalance_finding_of_0_1_0_reads_its_busy_shares():
    old = {"rule": "gpu_imbalance", "severity": "warning", "title": "t"}
    old["evidence"] = {"busy_pct": {"/device:GPU:0": 60.0}, "spread_points": 10.0}
    finding = Finding.model_validate(old)
    assert finding.evidence == {"busy_share": {"/device:GPU:0": 0.6}, "spread_points": 10.0}


def test_an_input_bound_finding_of_0_1_0_predicts_as_it_did():
    """input_bound's evidence held `input_share_pct` (0-100), as the calibration corpora still
    do: built from it (bench_calibration's `predict`), a finding reads the share its fix model
    reads, and predicts the same saving as from the new spelling."""
    summary = Summary(step_time=StepTime(count=20, avg_ms=40.0))
    kept = {"pipeline_lacks": ["parallel_calls", "prefetch"], "python_in_pipeline": False}
    old = Finding(rule="input_bound", severity=Severity.CRITICAL, title="", impact_share=0.9,
                  evidence={"input_share_pct": 90.0, **kept})  # fmt: skip
    new = Finding(rule="input_bound", severity=Severity.CRITICAL, title="", impact_share=0.9,
                  evidence={"input_share": 0.9, **kept})  # fmt: skip
    assert old.evidence == new.evidence and old.evidence["input_share"] == 0.9
    assert estimate(old, summary) == estimate(new, summary)
    assert estimate(new, summary).saving_share > 0


def test_an_eager_finding_of_0_1_0_reads_its_shares():
    assert Utilisation.model_validate({"host_eager_pct": 12.5}).host_eager_share == 0.125
    old = {"rule": "eager_execution", "severity": "warning", "title": "t"}
    old["evidence"] = {"host_eager_pct": 40.0, "device_eager_pct": None}
    finding = Finding.model_validate(old)
    assert finding.evidence == {"host_eager_share": 0.4, "device_eager_share": None}


def test_every_rename_is_from_a_percentage_to_a_share_since_this_release():
    assert RENAMED
    for renamed in RENAMED:
        assert renamed.old.endswith("_pct") or renamed.old == "gpus", renamed
        assert renamed.new.endswith("_share") and renamed.since == SINCE, renamed
