"""Table formats: each managed table's `format` ('iceberg' for every table so far, or
'hudi'), a timeline event's commit id as text for a format whose ids are not Iceberg's
64-bit snapshot ids (a Hudi instant, `20261125230101311`), and the catalog type `hudi`
(Hudi tables by base path under a warehouse)

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None
# Expand only: a column with a default, and a nullable one that code at 0018 never names
# (it always writes snapshot_id, which the CHECK then asks of it alone).
oldest_compatible_head = "0018"


def upgrade() -> None:
    op.drop_constraint(op.f("ck_catalogs_type"), "catalogs", type_="check")
    op.create_check_constraint(
        op.f("ck_catalogs_type"), "catalogs", "type IN ('jdbc', 'rest', 'hive', 'hudi')"
    )
    op.add_column(
        "managed_tables",
        sa.Column("format", sa.String(16), server_default=sa.text("'iceberg'"), nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_managed_tables_format"), "managed_tables", "format IN ('iceberg', 'hudi')"
    )
    # An Iceberg event keeps its bigint snapshot_id (every query and index of today stays
    # as it is); another format's event has commit_id instead. Exactly one of the two.
    op.add_column("timeline_events", sa.Column("commit_id", sa.Text(), nullable=True))
    op.alter_column("timeline_events", "snapshot_id", existing_type=sa.BigInteger(), nullable=True)
    op.create_unique_constraint(
        op.f("uq_timeline_events_table_id_commit_id"), "timeline_events", ["table_id", "commit_id"]
    )
    op.create_check_constraint(
        op.f("ck_timeline_events_one_commit_id"),
        "timeline_events",
        "(snapshot_id IS NULL) <> (commit_id IS NULL)",
    )


def downgrade() -> None:
    op.execute("DELETE FROM timeline_events WHERE snapshot_id IS NULL")
    op.drop_constraint(op.f("ck_timeline_events_one_commit_id"), "timeline_events", type_="check")
    op.drop_constraint(
        op.f("uq_timeline_events_table_id_commit_id"), "timeline_events", type_="unique"
    )
    op.alter_column("timeline_events", "snapshot_id", existing_type=sa.BigInteger(), nullable=False)
    op.drop_column("timeline_events", "commit_id")
    op.execute("DELETE FROM managed_tables WHERE format <> 'iceberg'")
    op.drop_constraint(op.f("ck_managed_tables_format"), "managed_tables", type_="check")
    op.drop_column("managed_tables", "format")
    op.execute("DELETE FROM catalogs WHERE type = 'hudi'")
    op.drop_constraint(op.f("ck_catalogs_type"), "catalogs", type_="check")
    op.create_check_constraint(
        op.f("ck_catalogs_type"), "catalogs", "type IN ('jdbc', 'rest', 'hive')"
    )
