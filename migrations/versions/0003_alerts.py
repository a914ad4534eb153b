"""alerts

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    now = sa.text("now()")
    op.create_table(
        "alerts",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("details", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("runbook", sa.Text(), nullable=True),
        sa.Column("first_seen", sa.DateTime(timezone=True), server_default=now, nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), server_default=now, nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acked_by", sa.String(length=255), nullable=True),
        sa.Column("acked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_state", sa.String(length=16), nullable=True),
        sa.Column("delivery_attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "next_delivery_at", sa.DateTime(timezone=True), server_default=now, nullable=False
        ),
        sa.Column("delivery_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
    )
    op.create_index(
        "uq_alerts_open_rule_key",
        "alerts",
        ["rule", "key"],
        unique=True,
        postgresql_where=sa.text("state <> 'resolved'"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_alerts_open_rule_key",
        table_name="alerts",
        postgresql_where=sa.text("state <> 'resolved'"),
    )
    op.drop_table("alerts")
