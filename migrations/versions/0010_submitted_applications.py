"""Submitted applications: how each job run runs, its submission and its heartbeat

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None
# Expand only: new nullable columns, and one with a default that code at 0009 never names
# (its runs are all in the warm session). That code keeps running on this schema.
oldest_compatible_head = "0009"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # "session": in the scheduler's warm Spark session; "application": its own Spark
    # application through spark-submit (lakewarden.jobs.application_entry).
    op.add_column(
        "job_runs",
        sa.Column("mode", sa.String(length=16), server_default="session", nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_job_runs_mode"), "job_runs", "mode IN ('session', 'application')"
    )
    op.add_column("job_runs", sa.Column("master", sa.String(length=255), nullable=True))
    op.add_column("job_runs", sa.Column("deploy_mode", sa.String(length=16), nullable=True))
    # Kubernetes: "<namespace>:<driver pod>"; a local process: "pid:<host>:<pid>".
    op.add_column("job_runs", sa.Column("submission_id", sa.String(length=255), nullable=True))
    # Written by the application while it runs: a new leader re-attaches a fresh one.
    op.add_column("job_runs", sa.Column("heartbeat_at", TS, nullable=True))


def downgrade() -> None:
    for column in ("heartbeat_at", "submission_id", "deploy_mode", "master"):
        op.drop_column("job_runs", column)
    op.drop_constraint(op.f("ck_job_runs_mode"), "job_runs", type_="check")
    op.drop_column("job_runs", "mode")
