"""Ingest the commits of a table whose format names them by text (a Hudi instant, a Delta
version) as timeline events, one per (table, commit), from a cursor: the newest commit the
table has an event for. `events.path_tables` gives it each format's log.

Such an event keeps the commit's id in `commit_id` (text; an Iceberg event's `snapshot_id`
stays NULL), its parent in `summary["parent"]`, the format's order as `sequence_number`
and the commit's operation as `operation`. `metadata_location` of the table's row is the
log's head token (the newest commit's file name): an unchanged token means nothing new,
and nothing is read. As with Iceberg, `INSERT ... ON CONFLICT DO NOTHING` keeps one event
per commit however often it is reported.

Events are recorded with the decision `no-action` and the format's reason, never handed to
the Iceberg kinds' verdicts; a poll's `judge` (Hudi's: its compaction kind) then judges the
newest of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.formats.base import Commit, CommitId, TimelinePage
from lakewarden.runtime import Runtime
from lakewarden.tables import get_table

PAGE = 1000  # commits read and inserted per round

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


class CommitLog(Protocol):
    """What ingesting asks of a format's log (beside the seam's `Timeline.since`)."""

    def head_token(self) -> str | None:
        """Changes whenever a commit lands (the newest commit file's name)."""
        ...

    def head_id(self) -> CommitId | None:
        """The newest commit's id."""
        ...

    def head(self) -> Commit | None:
        """The newest commit (the registration's baseline)."""
        ...

    def since(self, cursor: CommitId | None, limit: int) -> TimelinePage: ...


@dataclass(frozen=True)
class Ingested:
    new_event_ids: list[int]
    head: str | None  # the newest commit with an event now


def cursor_of(session: Session, table_id: int) -> str | None:
    """The newest commit (by the format's order) the table has an event for."""
    return session.scalar(
        select(TimelineEvent.commit_id)
        .where(TimelineEvent.table_id == table_id, TimelineEvent.commit_id.is_not(None))
        .order_by(TimelineEvent.sequence_number.desc().nulls_last(), TimelineEvent.id.desc())
        .limit(1)
    )


def insert_commits(
    session: Session,
    table_id: int,
    commits: list[Commit],
    *,
    source: str,
    head_token: str | None,
    reason: str,
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
                "detail": json.dumps({"reason": reason}),
                "ids": [c.id for c in commits],
                "seqs": [c.seq for c in commits],
                "operations": [c.operation for c in commits],
                "summaries": [json.dumps({**c.summary, "parent": c.parent}) for c in commits],
                "locations": [head_token if c is last else None for c in commits],
                "committed": [datetime.fromtimestamp(c.at_ms / 1000, tz=UTC) for c in commits],
            },
        )
    )


def sync_table(
    session: Session,
    row: ManagedTable,
    log: CommitLog,
    *,
    source: str,
    reason: str,
    baseline: bool = False,
    page: int = PAGE,
) -> Ingested:
    """Record every commit of the table after its cursor, oldest first. `baseline`
    (registration): only the newest commit, as Iceberg's registration records only the
    current snapshot: history before lakewarden managed the table is not replayed. `row`
    should be locked; an unchanged head token reads and writes nothing."""
    token = log.head_token()
    if row.metadata_location is not None and token == row.metadata_location:
        return Ingested([], cursor_of(session, row.id))
    new_ids: list[int] = []
    if baseline:
        head = log.head()
        if head is not None:
            new_ids = insert_commits(
                session, row.id, [head], source=source, head_token=token, reason=reason
            )
    else:
        cursor = cursor_of(session, row.id)
        head_id = log.head_id()
        while True:
            commits = list(log.since(cursor, page).commits)
            if not commits:
                break
            is_head = commits[-1].id == head_id
            new_ids += insert_commits(
                session,
                row.id,
                commits,
                source=source,
                head_token=token if is_head else None,
                reason=reason,
            )
            cursor = commits[-1].id
            if is_head:
                break
    row.metadata_location = token
    row.updated_at = func.now()
    session.flush()
    return Ingested(new_ids, cursor_of(session, row.id))


def refresh_from_log(
    rt: Runtime,
    entry: CatalogEntry,
    ref: TableRef,
    known: str | None,
    open_log: Callable[[CatalogEntry, TableRef], CommitLog],
    *,
    reason: str,
    judge: Callable[[Session, ManagedTable, list[int], Any], None] | None = None,
) -> int:
    """A poll of one managed table of a path catalog (`hudi`, `delta`): its log's head token
    read (no transaction open meanwhile) and, if it moved from `known`, its new commits
    ingested under the row's lock; 1 if there were any. `judge(session, row, new event
    ids, log)`: the format's kinds judge the new events, in the same transaction."""
    log = open_log(entry, ref)
    if known is not None and log.head_token() == known:
        return 0
    with transaction(rt.engine) as session:
        row = get_table(session, entry.name, ref)
        if row is None:
            return 0
        locked = session.get(ManagedTable, row.id, with_for_update=True, populate_existing=True)
        if locked is None or locked.retired_at is not None:
            return 0
        ingested = sync_table(session, locked, log, source="poll", reason=reason)
        if judge is not None:
            judge(session, locked, ingested.new_event_ids, log)
    return 1 if ingested.new_event_ids else 0
