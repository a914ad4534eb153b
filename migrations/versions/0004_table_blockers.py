"""table blockers

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "table_blockers",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name=op.f("fk_table_blockers_table_id_managed_tables"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_table_blockers")),
    )
    op.create_index(op.f("ix_table_blockers_table_id"), "table_blockers", ["table_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_table_blockers_table_id"), table_name="table_blockers")
    op.drop_table("table_blockers")
