"""A commit recorded after commits lakewarden could never read says so: `gap_before` on its
timeline event (the commits between it and the last one recorded had expired from the
table's metadata, or lay past the walk's bound, when the table was read).

Revision ID: 0035
Revises: 0034
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("timeline_events", sa.Column("gap_before", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("timeline_events", "gap_before")
