"""The hub's fleet index as tables: what lists, filters and the fleet view read, never whole
documents (a `snapshot.json` stays in the bucket; `GET /profiles/{id}` reads it from there).

The same tables on SQLite (one replica, the default: `PROFILER_STORE/fleet.sqlite`) and on
PostgreSQL (`PROFILER_HUB_DATABASE_URL`: every replica shares one). Alembic migrates them
(migrations/); a change here is a new revision there, and a test fails when they disagree.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = [
    "findings",
    "manifests",
    "metadata",
    "sidecars",
    "snapshot_counts",
    "snapshots",
    "sync_state",
]

metadata = MetaData()

snapshots = Table(
    "snapshots",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("location", String(16), nullable=False),  # ready or failed: where in the bucket
    Column("version", BigInteger, nullable=False),  # its snapshot.json's (bucket_client._version)
    Column("status", String(16), nullable=False),
    Column("target", String(128), nullable=False),
    Column("trigger", String(32), nullable=False),
    Column("pod", String(253)),
    Column("namespace", String(63)),
    Column("workload", String(253)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("pinned", Boolean, nullable=False),
    Column("step_time_ms", Float),
    Column("bottleneck", Text),
    Column("rules", Text, nullable=False),  # rule names, space-separated (the fleet view's)
    Column("findings", Text, nullable=False),  # rule:severity ... (the fleet view's)
    Column("gpu_waste", Text),  # CaptureWaste as JSON (analysis/gpu_waste.py), or NULL
    Column("item", Text, nullable=False),  # the list item (api/schemas.py): a few hundred bytes
    Index("snapshots_created", "created_at", "id"),
    Index("snapshots_namespace", "namespace", "created_at", "id"),
    Index("snapshots_target", "target", "created_at", "id"),
    Index("snapshots_workload", "workload", "created_at", "id"),
    Index("snapshots_pod", "pod", "created_at", "id"),
    Index("snapshots_status", "status", "created_at", "id"),
    Index("snapshots_trigger", "trigger", "created_at", "id"),
)

# One row per (rule, severity) a snapshot's findings hold: the rule and severity filters walk
# these newest first (created_at and namespace repeated here so one index answers a page, or a
# namespace's count).
findings = Table(
    "findings",
    metadata,
    Column(
        "snapshot_id",
        String(128),
        ForeignKey("snapshots.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("rule", String(64), primary_key=True),
    Column("severity", String(16), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("namespace", String(63)),  # its snapshot's: namespace + rule counts from one index
    Index("findings_rule", "rule", "created_at", "snapshot_id"),
    Index("findings_severity", "severity", "created_at", "snapshot_id"),
    Index("findings_rule_namespace", "rule", "namespace", "created_at", "snapshot_id"),
    Index("findings_severity_namespace", "severity", "namespace", "created_at", "snapshot_id"),
)

# Snapshots by namespace and status (`profiler_fleet_snapshots`): counted again by the sync
# that changed the index, so a scrape reads a few rows, not a million.
snapshot_counts = Table(
    "snapshot_counts",
    metadata,
    Column("namespace", String(63), primary_key=True),  # '' for none
    Column("status", String(16), primary_key=True),
    Column("snapshots", BigInteger, nullable=False),
)

# What the syncs remember between them, for whichever replica runs the next one.
sync_state = Table(
    "sync_state",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# Each sidecar manifest's version when a sync last read it (store/manifest.py).
manifests = Table(
    "manifests",
    metadata,
    Column("path", String(512), primary_key=True),
    Column("version", BigInteger, nullable=False),
)

# The registry (hub/registry.py): every replica reads the sidecars every other one heard.
sidecars = Table(
    "sidecars",
    metadata,
    Column("key", String(320), primary_key=True),  # namespace/name
    Column("replica", String(253), nullable=False),  # who heard it (`bucket`: its own record)
    Column("record", Text),  # SidecarRecord JSON; NULL once deregistered
    Column("seen_at", Float, nullable=False),  # epoch seconds of its last word
    Column("removed_at", Float),  # epoch seconds it deregistered, or NULL
    Index("sidecars_seen", "seen_at"),
)
