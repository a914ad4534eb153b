"""Where every commit road ends: ingest unseen commits, then evaluate them."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import TableRef, find_tables
from lakewarden.catalogs.foreign import detect_table
from lakewarden.catalogs.metadata_view import TableRead
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.evaluate import Evaluation, evaluate_batch
from lakewarden.events.ingest import MAX_WALK, Ingested, Sync, sync_tables
from lakewarden.runtime import Runtime
from lakewarden.tables import LIVE, TableGone, get_tables, retire_tables

log = logging.getLogger(__name__)


# How often one refresh reads the catalog again when another refresh of the table
# recorded a newer state between its read and its write.
REFRESH_TRIES = 3


def _lock_row(session: Session, table_id: int) -> ManagedTable | None:
    """The table's row, locked until the transaction ends; None if it was unregistered."""
    return lock_rows(session, [table_id]).get(table_id)


def lock_rows(session: Session, table_ids: list[int]) -> dict[int, ManagedTable]:
    """The tables' rows, locked until the transaction ends (FOR NO KEY UPDATE: rows that
    reference a table can still be written), in id order (two batches sharing tables never
    deadlock), in one statement. A table unregistered (retired) is absent: the WHERE is
    checked again on the row an unregistration committed while we waited."""
    if not table_ids:
        return {}
    rows = session.scalars(
        select(ManagedTable)
        .where(ManagedTable.id.in_(sorted(set(table_ids))), LIVE)
        .order_by(ManagedTable.id)
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    )
    return {row.id: row for row in rows}


def ingest_commits(
    session: Session,
    rt: Runtime,
    row: ManagedTable,
    table: TableRead,
    *,
    source: str,
    max_walk: int = MAX_WALK,
) -> Ingested:
    """`ingest_batch` of one table; TableGone if it is no longer managed."""
    ingested = ingest_batch(session, rt, [(row.id, table)], source=source, max_walk=max_walk)
    if row.id not in ingested:
        raise TableGone(f"table {row.namespace}.{row.name} is no longer managed")
    return ingested[row.id]


def ingest_batch(
    session: Session,
    rt: Runtime,
    tables: list[tuple[int, TableRead]],
    *,
    source: str,
    max_walk: int = MAX_WALK,
) -> dict[int, Ingested]:
    """Record and evaluate the commits not yet seen of each (table id, table read from the
    catalog beforehand), set-based: the rows locked in one statement, the commits of every
    table recorded and evaluated in a few (`sync_tables`, `evaluate_batch`). The rows are
    locked first, in id order, so ingests of one table (every road's) take their locks in
    one order and wait for each other. What each table recorded, by id; a table no longer
    managed is absent (one found maintained by another optimizer is retired: nothing
    recorded)."""
    locked = lock_rows(session, [table_id for table_id, _ in tables])
    out: dict[int, Ingested] = {}
    syncs: list[Sync] = []
    for table_id, table in tables:
        row = locked.get(table_id)
        if row is None:
            continue
        walk = max_walk
        if row.metadata_location is None and row.managed_by != "api":
            # Adopted by a management rule and seen for the first time.
            foreign = detect_table(table)
            if foreign is not None:
                # Never fight another optimizer: registering it explicitly (force) overrides.
                reason = f"maintained by {foreign.who}: {foreign.evidence}"
                retire_tables(session, [row.id], reason=reason, by=f"{source}:{rt.process_id}")
                log.info("%s.%s not managed: %s", row.namespace, row.name, reason)
                out[table_id] = Ingested([], None)
                continue
            walk = 1  # as a registration: its history before lakewarden is not replayed
        syncs.append(Sync(row, table, walk))
    ingested = sync_tables(session, syncs, source=source)
    evaluate_batch(
        session,
        [Evaluation(s.row, i.new_event_ids) for s, i in zip(syncs, ingested, strict=True)],
        actor=f"{source}:{rt.process_id}",
    )
    for s, i in zip(syncs, ingested, strict=True):
        out[s.row.id] = i
        if i.new_event_ids:
            log.info(
                "%s.%s: %d new commit(s) via %s",
                s.row.namespace,
                s.row.name,
                len(i.new_event_ids),
                source,
            )
    return out


def refresh_table(
    rt: Runtime,
    catalog: str,
    ref: TableRef,
    *,
    source: str,
    table: TableRead | None = None,
    location: str | None = None,
) -> Ingested | None:
    """`refresh_tables` of one table (`table`: as just loaded by the caller, a poll that
    compared its pointer, so it is not loaded twice); None if not managed."""
    found = refresh_tables(
        rt, catalog, {ref: location}, source=source, loaded={ref: table} if table else None
    )
    return found.get(ref)


def refresh_tables(
    rt: Runtime,
    catalog: str,
    wanted: dict[TableRef, str | None],
    *,
    source: str,
    loaded: Mapping[TableRef, TableRead] | None = None,
) -> dict[TableRef, Ingested | None]:
    """Ingest and evaluate every unseen commit of managed tables of one catalog, set-based
    (their pointers read in one query, `ingest_batch`); what each recorded, None for a table
    not managed or gone from the catalog. `wanted`: each table with the metadata pointer a
    notification reported (None: unknown); a table at the pointer already ingested is not
    read. `loaded`: tables the caller has just loaded, not loaded again.

    No transaction is open while the catalog is read. The write that follows is guarded:
    if a row's metadata pointer moved since it was read (another refresh recorded the
    table meanwhile, perhaps from an older read), the table is read again, so the row never
    goes back to an older state of the table."""
    out: dict[TableRef, Ingested | None] = {ref: None for ref in wanted}
    with transaction(rt.engine) as session:
        rows = get_tables(session, catalog, wanted)
        seen: dict[TableRef, tuple[int, str | None, int | None]] = {}
        for ref, row in rows.items():
            if wanted[ref] is not None and wanted[ref] == row.metadata_location:
                out[ref] = Ingested([], row.current_snapshot_id)
            else:
                seen[ref] = (row.id, row.metadata_location, row.current_snapshot_id)
    tables: dict[TableRef, TableRead | None] = dict(loaded or {})
    for _ in range(REFRESH_TRIES):
        if not seen:
            return out
        unread = [ref for ref in seen if tables.get(ref) is None]
        if unread:
            tables.update(find_tables(rt.catalogs.load(catalog), unread))
        for ref in [r for r in seen if tables.get(r) is None]:
            log.warning("managed table %s.%s is gone from the catalog", catalog, ref.dotted)
            del seen[ref]
        with transaction(rt.engine) as session:
            locked = lock_rows(session, [table_id for table_id, _, _ in seen.values()])
            ready: list[tuple[TableRef, int, TableRead]] = []
            for ref, (table_id, pointer, _) in list(seen.items()):
                now = locked.get(table_id)
                if now is None:
                    del seen[ref]  # unregistered meanwhile
                elif now.metadata_location == pointer:
                    table = tables[ref]
                    assert table is not None
                    ready.append((ref, table_id, table))
                    del seen[ref]
                else:  # recorded by another refresh meanwhile: read again
                    seen[ref] = (table_id, now.metadata_location, now.current_snapshot_id)
                    tables[ref] = None
            ingested = ingest_batch(session, rt, [(i, t) for _, i, t in ready], source=source)
            for ref, table_id, _ in ready:
                out[ref] = ingested.get(table_id)
    for ref, (_, _, current) in seen.items():
        log.info(
            "%s: refreshed by others meanwhile %d times; leaving it to them",
            ref.dotted,
            REFRESH_TRIES,
        )
        out[ref] = Ingested([], current)
    return out
