"""The Spark CPU each run used (issue 32 §3: `metrics.cost.executor_cpu_s`, from Spark's own
task metrics) joins the rollups of migration 0024, so `/metrics` exports a counter of it per
kind without scanning runs: the run trigger also appends a `spark_cpu` delta (n: runs
measured, total: CPU seconds). What runs already hold is counted once.

Revision ID: 0029
Revises: 0028
"""

from __future__ import annotations

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

_ROLLUP = """
CREATE OR REPLACE FUNCTION lakewarden_run_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    k text := (SELECT t.kind FROM tasks t WHERE t.id = NEW.task_id);
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO metric_deltas (family, kind, label, n, total)
        SELECT * FROM lakewarden_run_metrics(k, OLD.state, OLD.duration_ms, -1);{old_cost}
    END IF;
    INSERT INTO metric_deltas (family, kind, label, n, total)
    SELECT * FROM lakewarden_run_metrics(k, NEW.state, NEW.duration_ms, 1);{new_cost}
    RETURN NULL;
END $$
"""
_OLD_COST = """
        INSERT INTO metric_deltas (family, kind, label, n, total)
        SELECT * FROM lakewarden_run_cost(k, OLD.metrics, -1);"""
_NEW_COST = """
    INSERT INTO metric_deltas (family, kind, label, n, total)
    SELECT * FROM lakewarden_run_cost(k, NEW.metrics, 1);"""


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION lakewarden_run_cost(k text, metrics jsonb, sign int)
        RETURNS TABLE (family text, kind text, label text, n bigint, total float8)
        LANGUAGE sql STABLE AS $$
            SELECT 'spark_cpu', k, '', sign::bigint,
                   sign * (metrics -> 'cost' ->> 'executor_cpu_s')::float8
            WHERE metrics -> 'cost' ->> 'executor_cpu_s' IS NOT NULL
        $$
        """
    )
    op.execute(_ROLLUP.format(old_cost=_OLD_COST, new_cost=_NEW_COST))
    op.execute(
        """
        INSERT INTO metric_counts AS c (family, kind, label, n, total)
        SELECT f.family, f.kind, f.label, sum(f.n), sum(f.total)
        FROM job_runs r JOIN tasks t ON t.id = r.task_id,
             lakewarden_run_cost(t.kind, r.metrics, 1) AS f
        WHERE r.state <> 'running' OR r.duration_ms IS NOT NULL
        GROUP BY 1, 2, 3
        ON CONFLICT (family, kind, label) DO UPDATE
            SET n = c.n + excluded.n, total = c.total + excluded.total
        """
    )


def downgrade() -> None:
    op.execute(_ROLLUP.format(old_cost="", new_cost=""))
    op.execute("DELETE FROM metric_deltas WHERE family = 'spark_cpu'")
    op.execute("DELETE FROM metric_counts WHERE family = 'spark_cpu'")
    op.execute("DROP FUNCTION lakewarden_run_cost(text, jsonb, int)")
