"""Job runs: the link to each run's Spark UI or history server page

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None
# Expand only: a nullable column that code at 0011 never names.
oldest_compatible_head = "0011"


def upgrade() -> None:
    # The live Spark UI of the run's application while it runs, or its page on a Spark
    # history server (lakewarden.tasks.runs.run_ui_url).
    op.add_column("job_runs", sa.Column("ui_url", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("job_runs", "ui_url")
