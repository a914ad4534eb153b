"""Ingest a Hudi table's completed instants as timeline events (issue 28), through
`events.commit_log`: one event per (table, instant), from a cursor.

An event of a Hudi table keeps the instant's requested time in `commit_id`, the previous
completed instant as its parent, the completion time as `sequence_number` (the order
instants landed in) and the instant's action as `operation`; the table row's
`metadata_location` is the newest completed instant's file name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.db.models import ManagedTable
from lakewarden.evaluate import evaluate_events
from lakewarden.events.commit_log import PAGE, Ingested, refresh_from_log, sync_table
from lakewarden.formats.hudi.catalog import open_timeline
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.runtime import Runtime

# The decision an event is inserted with; a poll and a registration then judge the newest
# of a batch by the kinds that run on Hudi tables (lakewarden.evaluate: compaction), the
# older ones become `superseded`.
NO_KINDS_YET = "a Hudi instant, recorded; not judged by any kind (not the newest of its batch)"


def sync_hudi_table(
    session: Session,
    row: ManagedTable,
    timeline: HudiTimeline,
    *,
    source: str,
    baseline: bool = False,
    page: int = PAGE,
) -> Ingested:
    """Record every completed instant after the table's cursor (`commit_log.sync_table`)."""
    return sync_table(
        session, row, timeline, source=source, reason=NO_KINDS_YET, baseline=baseline, page=page
    )


def refresh_hudi_table(rt: Runtime, entry: CatalogEntry, ref: TableRef, known: str | None) -> int:
    """A poll of one managed table of a `hudi` catalog (`commit_log.refresh_from_log`)."""
    return refresh_from_log(
        rt, entry, ref, known, open_timeline, reason=NO_KINDS_YET, judge=_judge(rt)
    )


def _judge(rt: Runtime) -> Callable[[Session, ManagedTable, list[int], Any], None]:
    def judge(session: Session, row: ManagedTable, event_ids: list[int], log: Any) -> None:
        evaluate_events(session, row, event_ids, f"poll:{rt.process_id}", timeline=log)

    return judge
