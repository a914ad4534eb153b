"""Kind holds: a kind stopped on a table after a failed validation or repeated failures

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None
# Expand only: a new table that code at 0014 never names. Code at 0014 keeps creating and
# dispatching tasks of a held kind (it predates the hold), as code that predates a feature
# does, until it is replaced.
oldest_compatible_head = "0014"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "kind_holds",
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=True),
        sa.Column("rule", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("leader_epoch", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name="fk_kind_holds_table_id_managed_tables",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name="fk_kind_holds_task_id_tasks",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("table_id", "kind", name="pk_kind_holds"),
    )


def downgrade() -> None:
    # The holds cannot be kept in the older schema: they are lifted.
    op.drop_table("kind_holds")
