"""Empty partitions (issue 33 §3): a partition readiness row may have no commit (made ready
by a writer's heartbeat or the watermark passing it, or found late: no data and no
heartbeat past the policy's deadline), so its last commit is nullable; the writer's last
heartbeat for it, and since when it has been overdue (the `partition_overdue` alert's
condition); per table, when the leader's round must next look for empty periods although
nothing else changed (a period's deadline passing).

Revision ID: 0023
Revises: 0020 (0021 and 0022 are reserved for work landing in parallel: whichever lands
last names the one before it)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0020"
branch_labels = None
depends_on = None
# No oldest_compatible_head: code before this reads every row's last commit as set, and
# this one writes rows without one.


def upgrade() -> None:
    op.alter_column(
        "partition_readiness",
        "last_commit_at",
        existing_type=sa.DateTime(timezone=True),
        nullable=True,
    )
    op.alter_column(
        "partition_readiness",
        "last_commit_snapshot_id",
        existing_type=sa.BigInteger(),
        nullable=True,
    )
    op.create_check_constraint(
        op.f("ck_partition_readiness_one_last_commit"),
        "partition_readiness",
        "(last_commit_at IS NULL) = (last_commit_snapshot_id IS NULL)",
    )
    op.add_column(
        "partition_readiness", sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("partition_readiness", sa.Column("heartbeat_by", sa.String(255), nullable=True))
    op.add_column(
        "partition_readiness", sa.Column("overdue_since", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "readiness_cursors", sa.Column("empty_due_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.execute("DELETE FROM partition_readiness WHERE last_commit_snapshot_id IS NULL")
    op.drop_column("readiness_cursors", "empty_due_at")
    op.drop_column("partition_readiness", "overdue_since")
    op.drop_column("partition_readiness", "heartbeat_by")
    op.drop_column("partition_readiness", "heartbeat_at")
    op.drop_constraint(
        op.f("ck_partition_readiness_one_last_commit"), "partition_readiness", type_="check"
    )
    op.alter_column(
        "partition_readiness",
        "last_commit_snapshot_id",
        existing_type=sa.BigInteger(),
        nullable=False,
    )
    op.alter_column(
        "partition_readiness",
        "last_commit_at",
        existing_type=sa.DateTime(timezone=True),
        nullable=False,
    )
