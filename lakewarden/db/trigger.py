"""A trigger on Iceberg's JDBC catalog table that NOTIFYs on every commit.

Iceberg's JdbcCatalog (Spark, Flink, Trino...) and pyiceberg's SqlCatalog both
commit by moving `iceberg_tables.metadata_location`; the trigger turns that
move into a notification the API server LISTENs for.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from lakewarden.db.locks import DBLocks, xact_lock

CHANNEL = "lakewarden_commits"

# `op`: "commit" (the metadata pointer moved), "create", "drop", or "rename" (with the
# old names): auto-management hears a table appear, go, or change its name within seconds.
_FUNCTION = f"""
CREATE OR REPLACE FUNCTION lakewarden_notify_commit() RETURNS trigger AS $$
DECLARE
  op text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    op := 'create';
  ELSIF TG_OP = 'DELETE' THEN
    PERFORM pg_notify('{CHANNEL}', json_build_object(
      'op', 'drop', 'catalog', OLD.catalog_name, 'namespace', OLD.table_namespace,
      'name', OLD.table_name)::text);
    RETURN OLD;
  ELSIF NEW.table_name IS DISTINCT FROM OLD.table_name
     OR NEW.table_namespace IS DISTINCT FROM OLD.table_namespace THEN
    op := 'rename';
  ELSIF NEW.metadata_location IS DISTINCT FROM OLD.metadata_location THEN
    op := 'commit';
  ELSE
    RETURN NEW;
  END IF;
  PERFORM pg_notify('{CHANNEL}', json_build_object(
    'op', op,
    'catalog', NEW.catalog_name,
    'namespace', NEW.table_namespace,
    'name', NEW.table_name,
    'old_namespace', CASE WHEN op = 'rename' THEN OLD.table_namespace END,
    'old_name', CASE WHEN op = 'rename' THEN OLD.table_name END,
    'metadata_location', NEW.metadata_location)::text);
  RETURN NEW;
END;
$$ LANGUAGE plpgsql
"""

_TRIGGER = """
CREATE OR REPLACE TRIGGER lakewarden_commit_notify
AFTER INSERT OR UPDATE OR DELETE ON iceberg_tables
FOR EACH ROW EXECUTE FUNCTION lakewarden_notify_commit()
"""

# Bumped whenever _FUNCTION or _TRIGGER change: an older installed trigger is replaced.
_VERSION = "lakewarden commit trigger v2"


def install_commit_trigger(conn: Connection, *, refresh: bool = False) -> bool:
    """Install the trigger if missing (or `refresh` it, as `migrate` does); False when the
    catalog table does not exist. Serialized: concurrent DDL on one function fails in
    Postgres ("tuple concurrently updated"), and every API replica polls this."""
    if not conn.execute(text("SELECT to_regclass('iceberg_tables') IS NOT NULL")).scalar():
        return False
    xact_lock(conn, DBLocks.COMMIT_TRIGGER)
    present = conn.execute(
        text(
            "SELECT obj_description(t.tgfoid, 'pg_proc') = :v FROM pg_trigger t "
            "WHERE t.tgname = 'lakewarden_commit_notify' "
            "AND t.tgrelid = 'iceberg_tables'::regclass"
        ),
        {"v": _VERSION},
    ).scalar()
    if present and not refresh:
        return True
    conn.execute(text(_FUNCTION))
    conn.execute(text(f"COMMENT ON FUNCTION lakewarden_notify_commit() IS '{_VERSION}'"))
    conn.execute(text(_TRIGGER))
    return True
