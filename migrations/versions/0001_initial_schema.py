"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 18:46:44.463682
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader_lease",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leader_lease")),
    )
    op.create_table(
        "managed_tables",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("catalog", sa.String(length=255), nullable=False),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("policy", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("policy_version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("metadata_location", sa.Text(), nullable=True),
        sa.Column("current_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_managed_tables")),
        sa.UniqueConstraint(
            "catalog", "namespace", "name", name=op.f("uq_managed_tables_catalog_namespace_name")
        ),
    )
    op.create_table(
        "process_heartbeats",
        sa.Column("process_id", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "last_seen", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("current_task_id", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("process_id", name=op.f("pk_process_heartbeats")),
    )
    op.create_table(
        "policy_versions",
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("policy", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name=op.f("fk_policy_versions_table_id_managed_tables"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("table_id", "version", name=op.f("pk_policy_versions")),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("trigger", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("plan", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("3"), nullable=False),
        sa.Column(
            "not_before",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("holder", sa.String(length=255), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name=op.f("fk_tasks_table_id_managed_tables"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
    )
    op.create_index(
        "ix_tasks_claimable",
        "tasks",
        ["priority", "id"],
        unique=False,
        postgresql_where=sa.text("state IN ('pending', 'planned')"),
    )
    op.create_index("ix_tasks_state", "tasks", ["state"], unique=False)
    op.create_index(op.f("ix_tasks_table_id"), "tasks", ["table_id"], unique=False)
    op.create_index(
        "uq_tasks_open_table_kind",
        "tasks",
        ["table_id", "kind"],
        unique=True,
        postgresql_where=sa.text("state IN ('pending', 'planning', 'planned', 'running')"),
    )
    op.create_table(
        "timeline_events",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("parent_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("sequence_number", sa.BigInteger(), nullable=True),
        sa.Column("operation", sa.String(length=32), nullable=True),
        sa.Column("summary", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("metadata_location", sa.Text(), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("decision", sa.String(length=32), nullable=True),
        sa.Column("decision_detail", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name=op.f("fk_timeline_events_table_id_managed_tables"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_timeline_events")),
        sa.UniqueConstraint(
            "table_id", "snapshot_id", name=op.f("uq_timeline_events_table_id_snapshot_id")
        ),
    )
    op.create_index(
        op.f("ix_timeline_events_table_id"), "timeline_events", ["table_id"], unique=False
    )
    op.create_table(
        "job_runs",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("scheduler_id", sa.String(length=255), nullable=False),
        sa.Column("leader_epoch", sa.BigInteger(), nullable=False),
        sa.Column("spark_app_id", sa.String(length=255), nullable=True),
        sa.Column("spark_job_group", sa.String(length=255), nullable=True),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("metrics", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("committed_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_job_runs_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_runs")),
        sa.UniqueConstraint("task_id", "attempt", name=op.f("uq_job_runs_task_id_attempt")),
    )
    op.create_index(op.f("ix_job_runs_task_id"), "job_runs", ["task_id"], unique=False)
    op.create_table(
        "task_transitions",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("leader_epoch", sa.BigInteger(), nullable=True),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_task_transitions_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_transitions")),
    )
    op.create_index(
        op.f("ix_task_transitions_task_id"), "task_transitions", ["task_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_task_transitions_task_id"), table_name="task_transitions")
    op.drop_table("task_transitions")
    op.drop_index(op.f("ix_job_runs_task_id"), table_name="job_runs")
    op.drop_table("job_runs")
    op.drop_index(op.f("ix_timeline_events_table_id"), table_name="timeline_events")
    op.drop_table("timeline_events")
    op.drop_index(
        "uq_tasks_open_table_kind",
        table_name="tasks",
        postgresql_where=sa.text("state IN ('pending', 'planning', 'planned', 'running')"),
    )
    op.drop_index(op.f("ix_tasks_table_id"), table_name="tasks")
    op.drop_index("ix_tasks_state", table_name="tasks")
    op.drop_index(
        "ix_tasks_claimable",
        table_name="tasks",
        postgresql_where=sa.text("state IN ('pending', 'planned')"),
    )
    op.drop_table("tasks")
    op.drop_table("policy_versions")
    op.drop_table("process_heartbeats")
    op.drop_table("managed_tables")
    op.drop_table("leader_lease")
