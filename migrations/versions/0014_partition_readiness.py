"""Partition readiness: each partition's state, the per-table watermark and commit cursor,
and the outbox of partition_ready / partition_unready notifications

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None
# Expand only: three new tables that code at 0013 never names.
oldest_compatible_head = "0013"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "partition_readiness",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("column", sa.String(255), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("partition_end", TS, nullable=True),
        sa.Column("ready", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("since", TS, nullable=True),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("tag", sa.String(255), nullable=True),
        sa.Column("last_commit_at", TS, nullable=False),
        sa.Column("last_commit_snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("unready_at", TS, nullable=True),
        sa.Column("unready_reason", sa.Text(), nullable=True),
        sa.Column("updated_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name="fk_partition_readiness_table_id_managed_tables",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_partition_readiness"),
        sa.UniqueConstraint(
            "table_id",
            "column",
            "partition",
            name="uq_partition_readiness_table_id_column_partition",
        ),
    )
    op.create_index("ix_partition_readiness_table_id", "partition_readiness", ["table_id"])
    op.create_table(
        "readiness_cursors",
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("watermark", TS, nullable=True),
        sa.Column("watermark_by", sa.String(255), nullable=True),
        sa.Column("watermark_at", TS, nullable=True),
        sa.Column("scanned_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("scanned_column", sa.String(255), nullable=True),
        sa.Column("scanned_at", TS, nullable=True),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name="fk_readiness_cursors_table_id_managed_tables",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("table_id", name="pk_readiness_cursors"),
    )
    op.create_table(
        "readiness_notifications",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("ready", sa.Boolean(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("delivered_at", TS, nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name="fk_readiness_notifications_table_id_managed_tables",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_readiness_notifications"),
    )
    op.create_index("ix_readiness_notifications_table_id", "readiness_notifications", ["table_id"])
    op.create_index(
        "ix_readiness_notifications_undelivered",
        "readiness_notifications",
        ["id"],
        postgresql_where=sa.text("delivered_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("readiness_notifications")
    op.drop_table("readiness_cursors")
    op.drop_table("partition_readiness")
