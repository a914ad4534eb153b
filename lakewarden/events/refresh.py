"""Where every commit road ends: ingest unseen commits, then evaluate them."""

from __future__ import annotations

import logging

from pyiceberg.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import TableRef, find_table
from lakewarden.catalogs.foreign import detect_table
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.evaluate import evaluate_events
from lakewarden.events.ingest import MAX_WALK, Ingested, sync_table
from lakewarden.runtime import Runtime
from lakewarden.tables import LIVE, TableGone, get_table, retire_tables

log = logging.getLogger(__name__)


# How often one refresh reads the catalog again when another refresh of the table
# recorded a newer state between its read and its write.
REFRESH_TRIES = 3


def _lock_row(session: Session, table_id: int) -> ManagedTable | None:
    """The table's row, locked until the transaction ends (FOR NO KEY UPDATE: rows that
    reference the table can still be written); None if it was unregistered (retired: the
    WHERE is checked again on the row an unregistration committed while we waited)."""
    return session.scalars(
        select(ManagedTable)
        .where(ManagedTable.id == table_id, LIVE)
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    ).one_or_none()


def ingest_commits(
    session: Session,
    rt: Runtime,
    row: ManagedTable,
    table: Table,
    *,
    source: str,
    max_walk: int = MAX_WALK,
) -> Ingested:
    """Record and evaluate the commits of `table` (read from the catalog beforehand) not yet
    seen. The table's row is locked first, so ingests of one table (every road's) take
    their locks in one order and wait for each other."""
    locked = _lock_row(session, row.id)
    if locked is None:
        raise TableGone(f"table {row.namespace}.{row.name} is no longer managed")
    if locked.metadata_location is None and locked.managed_by != "api":
        # Adopted by a management rule and seen for the first time.
        foreign = detect_table(table)
        if foreign is not None:
            # Never fight another optimizer: registering it explicitly (force) overrides.
            reason = f"maintained by {foreign.who}: {foreign.evidence}"
            retire_tables(session, [locked.id], reason=reason, by=f"{source}:{rt.process_id}")
            log.info("%s.%s not managed: %s", locked.namespace, locked.name, reason)
            return Ingested([], None)
        max_walk = 1  # as a registration: its history before lakewarden is not replayed
    ingested = sync_table(session, locked, table, source=source, max_walk=max_walk)
    evaluate_events(session, locked, ingested.new_event_ids, actor=f"{source}:{rt.process_id}")
    if ingested.new_event_ids:
        log.info(
            "%s.%s: %d new commit(s) via %s",
            locked.namespace,
            locked.name,
            len(ingested.new_event_ids),
            source,
        )
    return ingested


def refresh_table(
    rt: Runtime,
    catalog: str,
    ref: TableRef,
    *,
    source: str,
    table: Table | None = None,
    location: str | None = None,
) -> Ingested | None:
    """Ingest and evaluate every unseen commit of a managed table; None if not managed.
    `table`: the table as just loaded by the caller (a poll that compared its pointer), so
    it is not loaded twice. `location`: the metadata pointer a notification reported; if
    it is the one already ingested, there is nothing to read.

    No transaction is open while the catalog is read. The write that follows is guarded:
    if the row's metadata pointer moved since it was read (another refresh recorded the
    table meanwhile, perhaps from an older read), the catalog is read again, so the row
    never goes back to an older state of the table."""
    with transaction(rt.engine) as session:
        row = get_table(session, catalog, ref)
        if row is None:
            return None
        table_id, seen = row.id, row.metadata_location
        if location is not None and location == seen:
            return Ingested([], row.current_snapshot_id)
    for _ in range(REFRESH_TRIES):
        if table is None:
            table = find_table(rt.catalogs.load(catalog), ref)
        if table is None:
            log.warning("managed table %s.%s is gone from the catalog", catalog, ref.dotted)
            return None
        with transaction(rt.engine) as session:
            row = _lock_row(session, table_id)
            if row is None:
                return None
            if row.metadata_location == seen:
                return ingest_commits(session, rt, row, table, source=source)
            seen, table = row.metadata_location, None
    log.info(
        "%s: refreshed by others meanwhile %d times; leaving it to them", ref.dotted, REFRESH_TRIES
    )
    return Ingested([], row.current_snapshot_id)
