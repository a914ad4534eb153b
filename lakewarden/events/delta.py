"""Ingest a Delta table's versions as timeline events (issue 29), through
`events.commit_log`: one event per (table, version), from a cursor.

An event of a Delta table keeps the version as text in `commit_id` and as its
`sequence_number`, the previous version as its parent, the commit's `operation` (WRITE,
MERGE, OPTIMIZE, ...), and a summary of its files added and removed, its operationMetrics
and its userMetadata (`formats.delta.timeline.summarize`); the table row's
`metadata_location` is the newest commit file's name.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.db.models import ManagedTable
from lakewarden.events.commit_log import PAGE, Ingested, refresh_from_log, sync_table
from lakewarden.formats.delta.catalog import open_timeline
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.runtime import Runtime

NO_KINDS_YET = (
    "a Delta table: its versions are recorded; no maintenance kind plans Delta tables yet "
    "(issue 29)"
)


def sync_delta_table(
    session: Session,
    row: ManagedTable,
    timeline: DeltaTimeline,
    *,
    source: str,
    baseline: bool = False,
    page: int = PAGE,
) -> Ingested:
    """Record every version after the table's cursor (`commit_log.sync_table`)."""
    return sync_table(
        session, row, timeline, source=source, reason=NO_KINDS_YET, baseline=baseline, page=page
    )


def refresh_delta_table(rt: Runtime, entry: CatalogEntry, ref: TableRef, known: str | None) -> int:
    """A poll of one managed table of a `delta` catalog (`commit_log.refresh_from_log`)."""
    return refresh_from_log(rt, entry, ref, known, open_timeline, reason=NO_KINDS_YET)
