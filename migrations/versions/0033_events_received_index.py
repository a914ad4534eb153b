"""Evaluation reads the events since a kind's last task as an index range
(lakewarden.evaluate's history facts), not a table's whole history (issue 31 goal 1: the
sustained ingest rate fell as history grew).

Revision ID: 0033
Revises: 0032
"""

from __future__ import annotations

from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_timeline_events_table_received", "timeline_events", ["table_id", "received_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_timeline_events_table_received", table_name="timeline_events")
