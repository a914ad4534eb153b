"""The polling fallback: catch commits no notification reported, on any catalog."""

from __future__ import annotations

from sqlalchemy import select, text

from lakewarden.catalog import TableRef
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import catalog_engine, transaction
from lakewarden.db.trigger import install_commit_trigger
from lakewarden.events.refresh import refresh_table
from lakewarden.isolation import PerTable
from lakewarden.runtime import Runtime
from lakewarden.tables import LIVE


def _jdbc_catalog_pointers(rt: Runtime) -> dict[tuple[str, str], str] | None:
    """Every table's metadata pointer in one query (JDBC catalog only)."""
    if rt.settings.catalog_type != "jdbc":
        return None
    engine = catalog_engine(rt.settings, rt.engine)
    with engine.begin() as conn:
        if engine is rt.engine:
            install_commit_trigger(conn)  # the catalog table may have appeared since start
        if not conn.execute(text("SELECT to_regclass('iceberg_tables') IS NOT NULL")).scalar():
            return {}
        rows = conn.execute(
            text(
                "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables "
                "WHERE catalog_name = :c"
            ),
            {"c": rt.settings.catalog_name},
        )
        return {(r[0], r[1]): r[2] for r in rows}


def poll_once(rt: Runtime) -> int:
    """Refresh every managed table whose metadata pointer moved; returns how many did.
    A table that fails is alerted (`lakewarden.isolation`) and retried on the next poll."""
    with transaction(rt.engine) as session:
        managed = session.execute(
            select(ManagedTable.namespace, ManagedTable.name, ManagedTable.metadata_location).where(
                ManagedTable.catalog == rt.settings.catalog_name, LIVE
            )
        ).all()
    pointers = _jdbc_catalog_pointers(rt)
    isolated = PerTable("poller")
    refreshed = 0
    for namespace, name, known_location in managed:
        if pointers is not None and pointers.get((namespace, name)) == known_location:
            continue
        with isolated.table(f"{namespace}.{name}"):
            result = refresh_table(rt, TableRef(namespace, name), source="poll")
            if result and result.new_event_ids:
                refreshed += 1
    with transaction(rt.engine) as session:
        isolated.record(session)
    return refreshed
