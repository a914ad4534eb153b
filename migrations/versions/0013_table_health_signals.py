"""Managed tables: the health signals that fired when the score was last measured

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None
# Expand only: a nullable column that code at 0012 never names (it keeps writing the score
# without it; the signals then lag until the new code measures the table again).
oldest_compatible_head = "0012"


def upgrade() -> None:
    # The fleet overview shows what fires per table without measuring it again: the list of
    # lakewarden.health.model.Signal (kind, metric, value, threshold, reason) stored with the
    # score. NULL: not measured (or cleared with the score); []: measured, nothing fires.
    op.add_column(
        "managed_tables",
        sa.Column("health_signals", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("managed_tables", "health_signals")
