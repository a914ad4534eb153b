"""Where every commit road ends: ingest unseen commits, then evaluate them."""

from __future__ import annotations

import logging

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy.orm import Session

from lakewarden.catalog import TableRef
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.evaluate import evaluate_events
from lakewarden.events.ingest import MAX_WALK, Ingested, sync_table
from lakewarden.runtime import Runtime
from lakewarden.tables import get_table

log = logging.getLogger(__name__)


def ingest_commits(
    session: Session,
    rt: Runtime,
    row: ManagedTable,
    table: Table,
    *,
    source: str,
    max_walk: int = MAX_WALK,
) -> Ingested:
    ingested = sync_table(session, row, table, source=source, max_walk=max_walk)
    evaluate_events(session, row, ingested.new_event_ids, actor=f"{source}:{rt.process_id}")
    if ingested.new_event_ids:
        log.info(
            "%s.%s: %d new commit(s) via %s",
            row.namespace,
            row.name,
            len(ingested.new_event_ids),
            source,
        )
    return ingested


def refresh_table(rt: Runtime, ref: TableRef, *, source: str) -> Ingested | None:
    """Ingest and evaluate every unseen commit of a managed table; None if not managed."""
    with transaction(rt.engine) as session:
        row = get_table(session, rt.settings.catalog_name, ref)
        if row is None:
            return None
        try:
            table = rt.catalog.load_table((ref.namespace, ref.name))
        except NoSuchTableError:
            log.warning("managed table %s is gone from the catalog", ref.dotted)
            return None
        return ingest_commits(session, rt, row, table, source=source)
