"""measured table health, for the SLO alert

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("managed_tables", sa.Column("health_score", sa.Integer(), nullable=True))
    op.add_column(
        "managed_tables",
        sa.Column("health_measured_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.add_column(
        "managed_tables", sa.Column("unhealthy_since", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("managed_tables", "unhealthy_since")
    op.drop_column("managed_tables", "health_measured_at")
    op.drop_column("managed_tables", "health_score")
