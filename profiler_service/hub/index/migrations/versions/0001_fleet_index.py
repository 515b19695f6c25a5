"""The fleet index: snapshots (columns, no documents), their findings, their counts, the syncs'
state, the manifests read, the sidecars' registry.

Revision ID: 0001
Revises:
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_SNAPSHOT_INDEXES = {
    "snapshots_created": ["created_at", "id"],
    "snapshots_namespace": ["namespace", "created_at", "id"],
    "snapshots_pod": ["pod", "created_at", "id"],
    "snapshots_status": ["status", "created_at", "id"],
    "snapshots_target": ["target", "created_at", "id"],
    "snapshots_trigger": ["trigger", "created_at", "id"],
    "snapshots_workload": ["workload", "created_at", "id"],
}
_FINDING_INDEXES = {
    "findings_rule": ["rule", "created_at", "snapshot_id"],
    "findings_severity": ["severity", "created_at", "snapshot_id"],
}


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("location", sa.String(16), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("trigger", sa.String(32), nullable=False),
        sa.Column("pod", sa.String(253)),
        sa.Column("namespace", sa.String(63)),
        sa.Column("workload", sa.String(253)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.Column("step_time_ms", sa.Float()),
        sa.Column("bottleneck", sa.Text()),
        sa.Column("rules", sa.Text(), nullable=False),
        sa.Column("findings", sa.Text(), nullable=False),
        sa.Column("gpu_waste", sa.Text()),
        sa.Column("item", sa.Text(), nullable=False),
    )
    for name, columns in _SNAPSHOT_INDEXES.items():
        op.create_index(name, "snapshots", columns)
    op.create_table(
        "findings",
        sa.Column(
            "snapshot_id",
            sa.String(128),
            sa.ForeignKey("snapshots.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("rule", sa.String(64), primary_key=True),
        sa.Column("severity", sa.String(16), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    for name, columns in _FINDING_INDEXES.items():
        op.create_index(name, "findings", columns)
    op.create_table(
        "snapshot_counts",
        sa.Column("namespace", sa.String(63), primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("snapshots", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "sync_state",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "manifests",
        sa.Column("path", sa.String(512), primary_key=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "sidecars",
        sa.Column("key", sa.String(320), primary_key=True),
        sa.Column("replica", sa.String(253), nullable=False),
        sa.Column("record", sa.Text()),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.Column("removed_at", sa.Float()),
    )
    op.create_index("sidecars_seen", "sidecars", ["seen_at"])


def downgrade() -> None:
    for table in (
        "sidecars",
        "manifests",
        "sync_state",
        "snapshot_counts",
        "findings",
        "snapshots",
    ):
        op.drop_table(table)
