"""Elastic capacity per pool (issue 32 §4): each pool's capacity now, and every change the
leader made to it with its reason (lakewarden.capacity).

Revision ID: 0032
Revises: 0031
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool_capacity",
        sa.Column("pool", sa.String(255), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("idle_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "changed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "checked_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("pool", name=op.f("pk_pool_capacity")),
    )
    op.create_table(
        "capacity_decisions",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("pool", sa.String(255), nullable=False),
        sa.Column("before", sa.Integer(), nullable=False),
        sa.Column("after", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("queued", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("oldest_wait_s", sa.Float(), nullable=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("leader_epoch", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_capacity_decisions")),
    )
    op.create_index("ix_capacity_decisions_pool", "capacity_decisions", ["pool", "id"])


def downgrade() -> None:
    op.drop_index("ix_capacity_decisions_pool", table_name="capacity_decisions")
    op.drop_table("capacity_decisions")
    op.drop_table("pool_capacity")
