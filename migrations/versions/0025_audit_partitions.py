"""The audit log partitioned by month (issue 31 §5): history past retention goes a whole
month (one partition) at a time, and no audit row is ever changed or deleted.

The append-only guard holds as before and on every partition: a statement trigger on the
parent refuses UPDATE, DELETE and TRUNCATE through it, a row trigger (cloned onto every
partition) refuses UPDATE and DELETE of a row through a partition, and each partition has
its own TRUNCATE trigger. The services' role keeps INSERT and SELECT on the parent only
(lakewarden.db.roles revokes everything on the partitions).

Partitions are made and dropped by `lakewarden_audit_maintain()`, the owner's function
(SECURITY DEFINER): it makes this month's and the next two months' partitions, and drops
the months that ended longer ago than `lakewarden_audit_retention_months()` (0: none),
which `lakewarden migrate`, run as the owner, sets from `retention_audit_months`. The
scheduler leader calls it with its pruning; the services' role can run it but neither
change the retention nor drop a partition itself. A row outside every month partition
(the leader down for months) lands in the DEFAULT partition, never dropped.

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_INDEXES = (
    ("ix_audit_log_at", "at"),
    ("ix_audit_log_actor", "actor"),
    ("ix_audit_log_action", "action"),
    ("ix_audit_log_catalog_namespace", "catalog, namespace"),
)


def _replace_audit_log(partitioned: bool) -> None:
    """Move audit_log's rows into a new table (partitioned by month or not) of the same
    columns and name, its sequence carried over."""
    op.execute("ALTER SEQUENCE audit_log_id_seq OWNED BY NONE")
    op.execute("ALTER TABLE audit_log RENAME TO audit_log_before")
    op.execute(
        "CREATE TABLE audit_log (LIKE audit_log_before INCLUDING DEFAULTS)"
        + (" PARTITION BY RANGE (at)" if partitioned else "")
    )
    if partitioned:
        op.execute("CREATE TABLE audit_log_default PARTITION OF audit_log DEFAULT")
        op.execute(
            "SELECT lakewarden_audit_partition(m) FROM generate_series(date_trunc('month', "
            "coalesce((SELECT min(at) FROM audit_log_before), now())), now(), "
            "interval '1 month') AS m"
        )
        op.execute("SELECT lakewarden_audit_maintain()")
    op.execute("INSERT INTO audit_log SELECT * FROM audit_log_before")
    op.execute("DROP TABLE audit_log_before")  # its trigger, constraint, indexes with it
    op.execute("ALTER SEQUENCE audit_log_id_seq OWNED BY audit_log.id")
    key = "id, at" if partitioned else "id"
    op.execute(f"ALTER TABLE audit_log ADD CONSTRAINT pk_audit_log PRIMARY KEY ({key})")
    for name, columns in _INDEXES:
        op.execute(f"CREATE INDEX {name} ON audit_log ({columns})")
    op.execute(
        "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE "
        "ON audit_log FOR EACH STATEMENT EXECUTE FUNCTION lakewarden_audit_append_only()"
    )
    if partitioned:
        op.execute(
            "CREATE TRIGGER audit_log_append_only_rows BEFORE UPDATE OR DELETE ON audit_log "
            "FOR EACH ROW EXECUTE FUNCTION lakewarden_audit_append_only()"
        )
        op.execute(
            "CREATE TRIGGER audit_log_append_only BEFORE TRUNCATE ON audit_log_default "
            "FOR EACH STATEMENT EXECUTE FUNCTION lakewarden_audit_append_only()"
        )


def upgrade() -> None:
    op.execute(
        "CREATE FUNCTION lakewarden_audit_retention_months() RETURNS int "
        "LANGUAGE sql IMMUTABLE AS 'SELECT 0'"
    )
    # The month (UTC) holding `at`: its partition, made once, with its TRUNCATE guard.
    # Not when the default partition already holds rows of that month (attaching would
    # fail): they stay there.
    op.execute(
        """
        CREATE FUNCTION lakewarden_audit_partition(at timestamptz) RETURNS void
        LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
        DECLARE
            lo timestamptz := date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
            hi timestamptz := (date_trunc('month', at AT TIME ZONE 'UTC') + interval '1 month')
                AT TIME ZONE 'UTC';
            name text := 'audit_log_p' || to_char(at AT TIME ZONE 'UTC', 'YYYYMM');
        BEGIN
            IF to_regclass(name) IS NOT NULL
               OR EXISTS (SELECT FROM audit_log_default WHERE audit_log_default.at >= lo
                          AND audit_log_default.at < hi) THEN
                RETURN;
            END IF;
            EXECUTE format('CREATE TABLE %I PARTITION OF audit_log FOR VALUES FROM (%L) TO (%L)',
                           name, lo, hi);
            EXECUTE format('CREATE TRIGGER audit_log_append_only BEFORE TRUNCATE ON %I '
                           'FOR EACH STATEMENT EXECUTE FUNCTION lakewarden_audit_append_only()',
                           name);
        END $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION lakewarden_audit_maintain() RETURNS int
        LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
        DECLARE
            keep int := lakewarden_audit_retention_months();
            month timestamp := date_trunc('month', now() AT TIME ZONE 'UTC');
            p record;
            dropped int := 0;
        BEGIN
            FOR i IN 0..2 LOOP
                PERFORM lakewarden_audit_partition(
                    (month + make_interval(months => i)) AT TIME ZONE 'UTC');
            END LOOP;
            IF keep > 0 THEN
                FOR p IN
                    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                    WHERE i.inhparent = 'audit_log'::regclass
                      AND c.relname ~ '^audit_log_p[0-9]{6}$'
                      AND to_date(substr(c.relname, 12), 'YYYYMM') + interval '1 month'
                          <= month - make_interval(months => keep)
                    ORDER BY c.relname
                LOOP
                    EXECUTE format('DROP TABLE %I', p.relname);
                    dropped := dropped + 1;
                END LOOP;
            END IF;
            RETURN dropped;
        END $$
        """
    )
    op.execute("REVOKE ALL ON FUNCTION lakewarden_audit_maintain() FROM PUBLIC")
    op.execute("REVOKE ALL ON FUNCTION lakewarden_audit_partition(timestamptz) FROM PUBLIC")
    _replace_audit_log(partitioned=True)


def downgrade() -> None:
    _replace_audit_log(partitioned=False)
    op.execute("DROP FUNCTION lakewarden_audit_maintain()")
    op.execute("DROP FUNCTION lakewarden_audit_partition(timestamptz)")
    op.execute("DROP FUNCTION lakewarden_audit_retention_months()")
