"""A trigger on Iceberg's JDBC catalog table that NOTIFYs on every commit.

Iceberg's JdbcCatalog (Spark, Flink, Trino...) and pyiceberg's SqlCatalog both
commit by moving `iceberg_tables.metadata_location`; the trigger turns that
move into a notification the API server LISTENs for.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from lakewarden.db.locks import DBLocks, xact_lock

CHANNEL = "lakewarden_commits"

_FUNCTION = f"""
CREATE OR REPLACE FUNCTION lakewarden_notify_commit() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.metadata_location IS DISTINCT FROM OLD.metadata_location THEN
    PERFORM pg_notify('{CHANNEL}', json_build_object(
      'catalog', NEW.catalog_name,
      'namespace', NEW.table_namespace,
      'name', NEW.table_name,
      'metadata_location', NEW.metadata_location)::text);
  END IF;
  RETURN NEW;
END;
$$ LANGUAGE plpgsql
"""

_TRIGGER = """
CREATE OR REPLACE TRIGGER lakewarden_commit_notify
AFTER INSERT OR UPDATE OF metadata_location ON iceberg_tables
FOR EACH ROW EXECUTE FUNCTION lakewarden_notify_commit()
"""


def install_commit_trigger(conn: Connection, *, refresh: bool = False) -> bool:
    """Install the trigger if missing (or `refresh` it, as `migrate` does); False when the
    catalog table does not exist. Serialized: concurrent DDL on one function fails in
    Postgres ("tuple concurrently updated"), and every API replica polls this."""
    if not conn.execute(text("SELECT to_regclass('iceberg_tables') IS NOT NULL")).scalar():
        return False
    xact_lock(conn, DBLocks.COMMIT_TRIGGER)
    present = conn.execute(
        text(
            "SELECT 1 FROM pg_trigger WHERE tgname = 'lakewarden_commit_notify' "
            "AND tgrelid = 'iceberg_tables'::regclass"
        )
    ).scalar()
    if present and not refresh:
        return True
    conn.execute(text(_FUNCTION))
    conn.execute(text(_TRIGGER))
    return True
