"""task pools, for per-pool concurrency limits

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "tasks",
        sa.Column(
            "pool", sa.String(length=64), server_default=sa.text("'default'"), nullable=False
        ),
    )


def downgrade() -> None:
    op.drop_column("tasks", "pool")
