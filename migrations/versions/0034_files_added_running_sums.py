"""Running sums of the data files writers added, so evaluation's "files added since the
kind's last task" is two probes, not a read of every event since (issue 31 goal 1: with a
task open, that range grew with each commit, and the sustained ingest rate fell with it).

`table_files_added` holds each table's running sum of `added-data-files` over its events
(not our own rewrites: operation 'replace'), kept by a statement trigger on
`timeline_events` (every road that inserts events: ingest, the listener, the path tables'
logs, tests), backfilled from the events kept today. A task remembers that sum as it is
created (`tasks.files_added_mark`, less the events already received after its
`created_at`, which a task inserted with a past time has not seen), so the files added
since a kind's last task are the sum now less the mark (lakewarden.evaluate). A task
created before this migration has no mark: its table's events since are summed as before.

Revision ID: 0034
Revises: 0033
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

# An event's added data files, as evaluation counts them (a malformed count counts 0
# rather than failing the ingest of its commit).
ADDED = (
    "CASE WHEN {s}->>'added-data-files' ~ '^\\s*[0-9]{{1,18}}\\s*$' "
    "THEN ({s}->>'added-data-files')::bigint ELSE 0 END"
)


def upgrade() -> None:
    op.create_table(
        "table_files_added",
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("added", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["managed_tables.id"],
            name=op.f("fk_table_files_added_table_id_managed_tables"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("table_id", name=op.f("pk_table_files_added")),
    )
    op.add_column("tasks", sa.Column("files_added_mark", sa.BigInteger(), nullable=True))
    op.execute(
        f"""
        INSERT INTO table_files_added (table_id, added)
        SELECT table_id, sum({ADDED.format(s="summary")}) FROM timeline_events
        WHERE operation <> 'replace' GROUP BY table_id
        """
    )
    # One upsert per inserting statement; its tables in id order, as ingest locks them.
    op.execute(
        f"""
        CREATE FUNCTION lakewarden_files_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO table_files_added AS a (table_id, added)
            SELECT table_id, sum({ADDED.format(s="summary")}) FROM new_events
            WHERE operation <> 'replace' GROUP BY table_id ORDER BY table_id
            ON CONFLICT (table_id) DO UPDATE SET added = a.added + excluded.added;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER timeline_events_files_added AFTER INSERT ON timeline_events "
        "REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT "
        "EXECUTE FUNCTION lakewarden_files_added()"
    )
    # The events received after the task's created_at are normally none (an index range of
    # ix_timeline_events_table_received that is empty).
    op.execute(
        f"""
        CREATE FUNCTION lakewarden_task_files_mark() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.files_added_mark IS NOT NULL THEN  -- a row copied back keeps its own
                RETURN NEW;
            END IF;
            NEW.files_added_mark :=
                coalesce((SELECT a.added FROM table_files_added a
                          WHERE a.table_id = NEW.table_id), 0)
                - (SELECT coalesce(sum({ADDED.format(s="e.summary")}), 0)
                   FROM timeline_events e
                   WHERE e.table_id = NEW.table_id AND e.operation <> 'replace'
                     AND e.received_at > NEW.created_at);
            RETURN NEW;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER tasks_files_mark BEFORE INSERT ON tasks FOR EACH ROW "
        "EXECUTE FUNCTION lakewarden_task_files_mark()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER tasks_files_mark ON tasks")
    op.execute("DROP FUNCTION lakewarden_task_files_mark()")
    op.execute("DROP TRIGGER timeline_events_files_added ON timeline_events")
    op.execute("DROP FUNCTION lakewarden_files_added()")
    op.drop_column("tasks", "files_added_mark")
    op.drop_table("table_files_added")
