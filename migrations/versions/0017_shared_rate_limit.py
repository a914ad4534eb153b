"""The API's rate limit shared by every replica: a counter per credential and minute

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None
# Expand only: a table that older code never names (it keeps its per-replica limit).
oldest_compatible_head = "0014"


def upgrade() -> None:
    # UNLOGGED: counts of the last two minutes, written on every change request; not worth
    # the WAL, and a crash that empties the table only forgives one minute of calls.
    op.create_table(
        "rate_counts",
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", "window_start", name=op.f("pk_rate_counts")),
        prefixes=["UNLOGGED"],
    )
    op.create_index(op.f("ix_rate_counts_window_start"), "rate_counts", ["window_start"])


def downgrade() -> None:
    op.drop_index(op.f("ix_rate_counts_window_start"), "rate_counts")
    op.drop_table("rate_counts")
