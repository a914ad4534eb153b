"""Metric rollups (issue 31 §4): /metrics's counters and histograms kept as work finishes,
not counted by scanning every finished task and run on each scrape.

Triggers on tasks and job_runs append what a row adds to (or, moving back, takes from)
the finished-task and ended-run counters and histograms to `metric_deltas`, in the same
transaction as the change: append-only rows, so concurrent transitions never wait on a
shared counter row (nor deadlock over two). The scheduler leader folds the deltas into
`metric_counts` (lakewarden.history.fold_metric_deltas); a scrape sums both. Deleting a
row takes nothing back: a counter does not drop when history is pruned or a table purged.
The buckets below are /metrics's (services/api/routes/metrics.py; a test holds them equal).

Each table's last success per kind (the per-table series, the dashboard) is kept the same
way, by the same trigger, in `table_last_success`: one row per (table, kind), not a probe
into each table's task history. Also the indexes that keep the scrape's gauges off the
history (running runs) and let retention (lakewarden.history) find what it must keep with
a probe each: a table's newest task and newest success of a kind, its newest event and
its commit cursor.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

TERMINAL = "('succeeded', 'skipped', 'failed', 'cancelled')"
FINISHED = "('succeeded', 'skipped', 'failed')"
TASK_LATENCY_BUCKETS = "1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400"
JOB_DURATION_BUCKETS = "1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200"


def _bucket(value: str, bounds: str) -> str:
    """The smallest bound `value` is at most (a histogram's `le`), as text; '+Inf' above all."""
    return (
        f"coalesce((SELECT min(b) FROM unnest(ARRAY[{bounds}]::float8[]) AS b "
        f"WHERE {value} <= b)::text, '+Inf')"
    )


def upgrade() -> None:
    for name in ("metric_counts", "metric_deltas"):
        columns = [
            sa.Column("family", sa.String(32), nullable=False),
            sa.Column("kind", sa.String(32), nullable=False),
            sa.Column("label", sa.String(32), nullable=False),
            sa.Column("n", sa.BigInteger(), nullable=False),
            sa.Column("total", sa.Float(), nullable=False),
        ]
        if name == "metric_counts":
            op.create_table(
                name,
                *columns,
                sa.PrimaryKeyConstraint("family", "kind", "label", name=op.f("pk_metric_counts")),
            )
        else:
            op.create_table(
                name,
                sa.Column("id", sa.BigInteger(), nullable=False),
                *columns,
                sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_deltas")),
            )
    op.create_table(
        "table_last_success",
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name=op.f("fk_table_last_success_table_id_managed_tables"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("table_id", "kind", name=op.f("pk_table_last_success")),
    )
    # What one task (one run) adds to the families, times `sign`: its terminal state's
    # count, and its latency (duration) in its bucket.
    op.execute(
        f"""
        CREATE FUNCTION lakewarden_task_metrics(
            k text, s text, created timestamptz, updated timestamptz, sign int
        ) RETURNS TABLE (family text, kind text, label text, n bigint, total float8)
        LANGUAGE sql STABLE AS $$
            SELECT 'task_state', k, s, sign::bigint, 0::float8 WHERE s IN {TERMINAL}
            UNION ALL
            SELECT 'task_latency', k, {_bucket("v", TASK_LATENCY_BUCKETS)}, sign::bigint, sign * v
            FROM (SELECT extract(epoch FROM updated - created)::float8 AS v) AS x
            WHERE s IN {FINISHED}
        $$
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION lakewarden_run_metrics(k text, s text, duration_ms bigint, sign int)
        RETURNS TABLE (family text, kind text, label text, n bigint, total float8)
        LANGUAGE sql STABLE AS $$
            SELECT 'run_state', k, s, sign::bigint, 0::float8 WHERE s <> 'running'
            UNION ALL
            SELECT 'job_duration', k, {_bucket("v", JOB_DURATION_BUCKETS)}, sign::bigint, sign * v
            FROM (SELECT (duration_ms / 1000.0)::float8 AS v) AS x WHERE duration_ms IS NOT NULL
        $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION lakewarden_task_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'UPDATE' THEN
                INSERT INTO metric_deltas (family, kind, label, n, total)
                SELECT * FROM lakewarden_task_metrics(
                    OLD.kind, OLD.state, OLD.created_at, OLD.updated_at, -1);
            END IF;
            INSERT INTO metric_deltas (family, kind, label, n, total)
            SELECT * FROM lakewarden_task_metrics(
                NEW.kind, NEW.state, NEW.created_at, NEW.updated_at, 1);
            IF NEW.state = 'succeeded' THEN
                INSERT INTO table_last_success AS l (table_id, kind, at)
                VALUES (NEW.table_id, NEW.kind, NEW.updated_at)
                ON CONFLICT (table_id, kind) DO UPDATE SET at = greatest(l.at, excluded.at);
            END IF;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION lakewarden_run_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            k text := (SELECT t.kind FROM tasks t WHERE t.id = NEW.task_id);
        BEGIN
            IF TG_OP = 'UPDATE' THEN
                INSERT INTO metric_deltas (family, kind, label, n, total)
                SELECT * FROM lakewarden_run_metrics(k, OLD.state, OLD.duration_ms, -1);
            END IF;
            INSERT INTO metric_deltas (family, kind, label, n, total)
            SELECT * FROM lakewarden_run_metrics(k, NEW.state, NEW.duration_ms, 1);
            RETURN NULL;
        END $$
        """
    )
    # Only rows that count: an open task's many updates (heartbeats, plans) append nothing.
    op.execute(
        "CREATE TRIGGER tasks_rollup_insert AFTER INSERT ON tasks FOR EACH ROW "
        f"WHEN (NEW.state IN {TERMINAL}) EXECUTE FUNCTION lakewarden_task_rollup()"
    )
    op.execute(
        "CREATE TRIGGER tasks_rollup_update AFTER UPDATE OF state, kind, created_at, updated_at "
        f"ON tasks FOR EACH ROW WHEN ((OLD.state IN {TERMINAL} OR NEW.state IN {TERMINAL}) "
        "AND (OLD.state, OLD.kind, OLD.created_at, OLD.updated_at) IS DISTINCT FROM "
        "(NEW.state, NEW.kind, NEW.created_at, NEW.updated_at)) "
        "EXECUTE FUNCTION lakewarden_task_rollup()"
    )
    op.execute(
        "CREATE TRIGGER job_runs_rollup_insert AFTER INSERT ON job_runs FOR EACH ROW "
        "WHEN (NEW.state <> 'running' OR NEW.duration_ms IS NOT NULL) "
        "EXECUTE FUNCTION lakewarden_run_rollup()"
    )
    op.execute(
        "CREATE TRIGGER job_runs_rollup_update AFTER UPDATE OF state, duration_ms ON job_runs "
        "FOR EACH ROW WHEN ((OLD.state, OLD.duration_ms) IS DISTINCT FROM "
        "(NEW.state, NEW.duration_ms)) EXECUTE FUNCTION lakewarden_run_rollup()"
    )
    # What history there is already, counted once.
    op.execute(
        """
        INSERT INTO metric_counts (family, kind, label, n, total)
        SELECT m.family, m.kind, m.label, sum(m.n), sum(m.total) FROM (
            SELECT f.* FROM tasks t, lakewarden_task_metrics(
                t.kind, t.state, t.created_at, t.updated_at, 1) AS f
            UNION ALL
            SELECT f.* FROM job_runs r JOIN tasks t ON t.id = r.task_id,
                lakewarden_run_metrics(t.kind, r.state, r.duration_ms, 1) AS f
        ) AS m GROUP BY 1, 2, 3
        """
    )
    op.execute(
        "INSERT INTO table_last_success (table_id, kind, at) SELECT table_id, kind, "
        "max(updated_at) FROM tasks WHERE state = 'succeeded' GROUP BY 1, 2"
    )
    op.create_index(
        "ix_job_runs_running",
        "job_runs",
        ["task_id"],
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_index(
        "ix_tasks_last_success",
        "tasks",
        ["table_id", "kind", "updated_at"],
        postgresql_where=sa.text("state = 'succeeded'"),
    )

    op.create_index("ix_tasks_table_kind", "tasks", ["table_id", "kind", "id"])
    op.create_index("ix_timeline_events_table_newest", "timeline_events", ["table_id", "id"])
    op.create_index(
        "ix_timeline_events_table_sequence", "timeline_events", ["table_id", "sequence_number"]
    )


def downgrade() -> None:
    op.drop_index("ix_timeline_events_table_sequence", table_name="timeline_events")
    op.drop_index("ix_timeline_events_table_newest", table_name="timeline_events")
    op.drop_index("ix_tasks_table_kind", table_name="tasks")
    op.drop_index("ix_tasks_last_success", table_name="tasks")
    op.drop_index("ix_job_runs_running", table_name="job_runs")
    for trigger, table in (
        ("tasks_rollup_insert", "tasks"),
        ("tasks_rollup_update", "tasks"),
        ("job_runs_rollup_insert", "job_runs"),
        ("job_runs_rollup_update", "job_runs"),
    ):
        op.execute(f"DROP TRIGGER {trigger} ON {table}")
    op.execute("DROP FUNCTION lakewarden_task_rollup()")
    op.execute("DROP FUNCTION lakewarden_run_rollup()")
    op.execute("DROP FUNCTION lakewarden_task_metrics(text, text, timestamptz, timestamptz, int)")
    op.execute("DROP FUNCTION lakewarden_run_metrics(text, text, bigint, int)")
    op.drop_table("table_last_success")
    op.drop_table("metric_deltas")
    op.drop_table("metric_counts")
