"""Ingest a Hudi table's completed instants as timeline events (issue 28), one per
(table, instant), from a cursor: the newest instant the table has an event for.

An event of a Hudi table keeps the instant's requested time in `commit_id` (text; an
Iceberg event's `snapshot_id` stays NULL), the previous completed instant as its parent in
`summary["parent"]`, the completion time as `sequence_number` (the order instants landed
in) and the instant's action as `operation`. `metadata_location` of the table's row is the
timeline's head token (the newest completed instant's file name): an unchanged token means
nothing new, and nothing is read. As with Iceberg, `INSERT ... ON CONFLICT DO NOTHING`
keeps one event per instant however often it is reported.

Events are inserted with the decision `no-action`; a poll and a registration then judge
the newest of them by the kinds that run on Hudi tables (`lakewarden.evaluate`, with the
timeline just read: compaction of merge-on-read tables), never by the Iceberg kinds'
verdicts; the older ones of the batch become `superseded`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.evaluate import evaluate_events
from lakewarden.formats.base import Commit
from lakewarden.formats.hudi.catalog import open_timeline
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.runtime import Runtime
from lakewarden.tables import get_table

PAGE = 1000  # instants read and inserted per round

NO_KINDS_YET = "a Hudi instant, recorded; not judged by any kind (not the newest of its batch)"

_INSERT = text(
    """
    INSERT INTO timeline_events (table_id, commit_id, sequence_number, operation, summary,
        metadata_location, source, committed_at, decision, decision_detail)
    SELECT :table_id, u.commit_id, u.seq, u.operation, CAST(u.summary AS jsonb), u.location,
        :source, u.committed_at, 'no-action', CAST(:detail AS jsonb)
    FROM unnest(CAST(:ids AS text[]), CAST(:seqs AS bigint[]), CAST(:operations AS text[]),
        CAST(:summaries AS text[]), CAST(:locations AS text[]),
        CAST(:committed AS timestamptz[]))
        AS u(commit_id, seq, operation, summary, location, committed_at)
    ON CONFLICT (table_id, commit_id) DO NOTHING
    RETURNING id
    """
)


@dataclass(frozen=True)
class HudiIngested:
    new_event_ids: list[int]
    head: str | None  # the newest completed instant now (requested time)


def cursor_of(session: Session, table_id: int) -> str | None:
    """The newest instant (by completion) the table has an event for."""
    return session.scalar(
        select(TimelineEvent.commit_id)
        .where(TimelineEvent.table_id == table_id, TimelineEvent.commit_id.is_not(None))
        .order_by(TimelineEvent.sequence_number.desc().nulls_last(), TimelineEvent.id.desc())
        .limit(1)
    )


def insert_commits(
    session: Session, table_id: int, commits: list[Commit], *, source: str, head_token: str | None
) -> list[int]:
    """One event per commit, in one statement, in the order given; the ids inserted."""
    if not commits:
        return []
    last = commits[-1]
    return sorted(
        session.scalars(
            _INSERT,
            {
                "table_id": table_id,
                "source": source,
                "detail": json.dumps({"reason": NO_KINDS_YET}),
                "ids": [c.id for c in commits],
                "seqs": [c.seq for c in commits],
                "operations": [c.operation for c in commits],
                "summaries": [json.dumps({**c.summary, "parent": c.parent}) for c in commits],
                "locations": [head_token if c is last else None for c in commits],
                "committed": [datetime.fromtimestamp(c.at_ms / 1000, tz=UTC) for c in commits],
            },
        )
    )


def sync_hudi_table(
    session: Session,
    row: ManagedTable,
    timeline: HudiTimeline,
    *,
    source: str,
    baseline: bool = False,
    page: int = PAGE,
) -> HudiIngested:
    """Record every completed instant of the table after its cursor, oldest first.
    `baseline` (registration): only the newest instant, as Iceberg's registration records
    only the current snapshot: history before lakewarden managed the table is not replayed.
    `row` should be locked; an unchanged head token reads and writes nothing."""
    token = timeline.head_token()
    if row.metadata_location is not None and token == row.metadata_location:
        return HudiIngested([], cursor_of(session, row.id))
    new_ids: list[int] = []
    if baseline:
        done = timeline.completed()
        if done:
            head = timeline.commit(done[-1], done[-2] if len(done) > 1 else None)
            new_ids = insert_commits(session, row.id, [head], source=source, head_token=token)
    else:
        cursor = cursor_of(session, row.id)
        while True:
            commits = list(timeline.since(cursor, page).commits)
            if not commits:
                break
            is_head = commits[-1].id == timeline.completed()[-1].requested
            new_ids += insert_commits(
                session, row.id, commits, source=source, head_token=token if is_head else None
            )
            cursor = commits[-1].id
            if is_head:
                break
    row.metadata_location = token
    row.updated_at = func.now()
    session.flush()
    return HudiIngested(new_ids, cursor_of(session, row.id))


def refresh_hudi_table(rt: Runtime, entry: CatalogEntry, ref: TableRef, known: str | None) -> int:
    """A poll of one managed table of a `hudi` catalog: its timeline's head token read (no
    transaction open meanwhile) and, if it moved from `known`, its new instants ingested
    under the row's lock; 1 if there were any."""
    timeline = open_timeline(entry, ref)
    if known is not None and timeline.head_token() == known:
        return 0
    with transaction(rt.engine) as session:
        row = get_table(session, entry.name, ref)
        if row is None:
            return 0
        locked = session.get(ManagedTable, row.id, with_for_update=True, populate_existing=True)
        if locked is None or locked.retired_at is not None:
            return 0
        ingested = sync_hudi_table(session, locked, timeline, source="poll")
        actor = f"poll:{rt.process_id}"
        evaluate_events(session, locked, ingested.new_event_ids, actor, timeline=timeline)
    return 1 if ingested.new_event_ids else 0
