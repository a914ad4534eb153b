"""Ingest a path table's commits as timeline events, through `events.commit_log`: one event
per (table, commit), from a cursor; the newest of a batch is judged by the kinds that run on
the table's format (`lakewarden.evaluate`, `kinds.formats`), the older ones superseded.

- A Hudi table (issue 28): each completed instant. Its event keeps the instant's requested
  time in `commit_id`, the previous completed instant as its parent, the completion time
  as `sequence_number` (the order instants landed in) and the instant's action as
  `operation`; the row's `metadata_location` is the newest completed instant's file name.
- A Delta table (issue 29): each log version. Its event keeps the version as text in
  `commit_id` and as its `sequence_number`, the previous version as its parent, the
  commit's `operation` (WRITE, MERGE, OPTIMIZE, ...) and a summary of its files added and
  removed, its operationMetrics and userMetadata (`formats.delta.timeline.summarize`); the
  row's `metadata_location` is the newest commit file's name.

A poll (`refresh_path_table`) finds new commits by the head token; a push (`push_path_table`:
`POST /api/v1/events`, Hudi's write-commit callback) ingests from the cursor at once, in the
caller's transaction. Both record through `commit_log.sync_table`, so a commit pushed, then
polled (or pushed twice) is one event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.evaluate import evaluate_events
from lakewarden.events.commit_log import PAGE, CommitLog, Ingested, refresh_from_log, sync_table
from lakewarden.formats.delta import catalog as delta_catalog
from lakewarden.formats.delta.timeline import NotADeltaTable, UnsupportedProtocol
from lakewarden.formats.hudi import catalog as hudi_catalog
from lakewarden.formats.hudi.timeline import NotAHudiTable, UnsupportedTableVersion
from lakewarden.runtime import Runtime

# The decision an event is inserted with; the newest of its batch is then judged.
UNJUDGED = "a commit, recorded; not judged by any kind (not the newest of its batch)"

# Each path format's log of one table (a path catalog's, `states.PATH_CATALOGS`, or a Hive
# catalog's Hudi and Delta tables).
LOGS: dict[str, Callable[[CatalogEntry, TableRef], CommitLog]] = {
    "hudi": hudi_catalog.open_timeline,
    "delta": delta_catalog.open_timeline,
}

# Opening or reading a log: no table at the path (a 404), or one lakewarden cannot read (422).
LOG_MISSING = (NotAHudiTable, NotADeltaTable)
LOG_UNREADABLE = (UnsupportedTableVersion, UnsupportedProtocol)


def sync_path_table(
    session: Session,
    row: ManagedTable,
    log: CommitLog,
    *,
    source: str,
    baseline: bool = False,
    page: int = PAGE,
) -> Ingested:
    """Record every commit after the table's cursor (`commit_log.sync_table`)."""
    return sync_table(
        session, row, log, source=source, reason=UNJUDGED, baseline=baseline, page=page
    )


def refresh_path_table(
    rt: Runtime, entry: CatalogEntry, ref: TableRef, known: str | None, table_format: str
) -> int:
    """A poll of one managed Hudi or Delta table (`commit_log.refresh_from_log`), its new
    commits judged."""
    return refresh_from_log(
        rt, entry, ref, known, LOGS[table_format], reason=UNJUDGED, judge=_judge(rt)
    )


def push_path_table(
    session: Session, entry: CatalogEntry, row: ManagedTable, actor: str
) -> Ingested:
    """A commit pushed for a managed path table: its commits after the cursor recorded now,
    under the row's lock, and the new ones judged, in the caller's transaction (the task
    a commit calls for is open when it commits). LOG_MISSING or LOG_UNREADABLE if the
    table's log cannot be read."""
    log = LOGS[entry.type](entry, TableRef(row.namespace, row.name))
    session.refresh(row, with_for_update=True)
    ingested = sync_path_table(session, row, log, source="webhook")
    evaluate_events(session, row, ingested.new_event_ids, actor, timeline=log)
    return ingested


def commit_event(session: Session, table_id: int, commit: str) -> TimelineEvent | None:
    """The event of one commit of a path table (its instant or version), if recorded."""
    return session.scalars(
        select(TimelineEvent).where(
            TimelineEvent.table_id == table_id, TimelineEvent.commit_id == commit
        )
    ).one_or_none()


def _judge(rt: Runtime) -> Callable[[Session, ManagedTable, list[int], Any], None]:
    def judge(session: Session, row: ManagedTable, event_ids: list[int], log: Any) -> None:
        evaluate_events(session, row, event_ids, f"poll:{rt.process_id}", timeline=log)

    return judge
