"""Write-audit-publish (issue 33 §1): each audit of a table's audit branch head, judged
once (what its checks found, whether main was fast-forwarded to it). The latest audit of a
table that failed is the `publish_refused` alert's condition.

Revision ID: 0030
Revises: 0029
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "publish_audits",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("branch_snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("main_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("published", sa.Boolean(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=True),
        sa.Column("checks", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name=op.f("fk_publish_audits_table_id_managed_tables"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_publish_audits")),
        sa.UniqueConstraint(
            "table_id", "branch", "branch_snapshot_id", name="uq_publish_audits_head"
        ),
    )
    op.create_index("ix_publish_audits_table", "publish_audits", ["table_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_publish_audits_table", table_name="publish_audits")
    op.drop_table("publish_audits")
