"""Idempotent ingest of commits: one timeline event per (table, snapshot).

However many times a commit is reported (NOTIFY, webhook, poll) and however
many API replicas hear it, `INSERT ... ON CONFLICT DO NOTHING` keeps one row,
and only the inserter evaluates it, so each commit is evaluated once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from sqlalchemy import BigInteger, any_, bindparam, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.db.paging import Page, PageRequest, keyset_page
from lakewarden.formats.iceberg import history

# How far back one sync walks a table's history looking for unseen commits.
MAX_WALK = 1000
# The walk asks the database about this many snapshot ids first (most syncs find one new
# commit), then twice as many each round, up to MAX_CHUNK.
FIRST_CHUNK = 8
MAX_CHUNK = 256


@dataclass(frozen=True)
class Ingested:
    new_event_ids: list[int]
    current_snapshot_id: int | None


def snapshot_fields(snapshot: Snapshot) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    if snapshot.summary is not None:
        summary = {k: v for k, v in snapshot.summary.additional_properties.items()}
        summary["operation"] = snapshot.summary.operation.value
    return {
        "snapshot_id": snapshot.snapshot_id,
        "parent_snapshot_id": snapshot.parent_snapshot_id,
        "sequence_number": snapshot.sequence_number,
        "operation": summary.get("operation"),
        "summary": summary,
        "committed_at": datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=UTC),
    }


def known_snapshots(session: Session, table_id: int, snapshot_ids: list[int]) -> set[int]:
    """Which of `snapshot_ids` the table already has an event for (one indexed lookup on
    the (table_id, snapshot_id) unique key, however long the table's history)."""
    if not snapshot_ids:
        return set()
    return set(
        session.scalars(
            select(TimelineEvent.snapshot_id).where(
                TimelineEvent.table_id == table_id,
                TimelineEvent.snapshot_id
                == any_(bindparam("snapshot_ids", snapshot_ids, type_=ARRAY(BigInteger))),
            )
        )
    )


def unseen_snapshots(
    session: Session, table_id: int, table: Table, *, max_walk: int = MAX_WALK
) -> list[Snapshot]:
    """The commits of `table` not recorded yet, newest first: walked back from the current
    snapshot in chunks (FIRST_CHUNK ids, then doubling up to MAX_CHUNK), asking the database
    only which ids of each chunk it knows, and stopping at the first known one. What it
    reads is bounded by the new commits (plus one chunk), never the table's whole history."""
    unseen: list[Snapshot] = []
    walk = history.ancestors(table, table.current_snapshot(), max_walk)
    size = FIRST_CHUNK
    while len(unseen) < max_walk:
        chunk = list(islice(walk, min(size, max_walk - len(unseen))))
        if not chunk:
            break
        known = known_snapshots(session, table_id, [s.snapshot_id for s in chunk])
        for snap in chunk:
            if snap.snapshot_id in known:
                return unseen
            unseen.append(snap)
        size = min(size * 2, MAX_CHUNK)
    return unseen


_INSERT_EVENTS = text(
    """
    INSERT INTO timeline_events (table_id, snapshot_id, parent_snapshot_id, sequence_number,
        operation, summary, metadata_location, source, committed_at)
    SELECT :table_id, u.snapshot_id, u.parent_snapshot_id, u.sequence_number, u.operation,
        u.summary::jsonb, u.metadata_location, :source, u.committed_at
    FROM unnest(CAST(:snapshot_ids AS bigint[]), CAST(:parents AS bigint[]),
        CAST(:sequences AS bigint[]), CAST(:operations AS text[]), CAST(:summaries AS text[]),
        CAST(:locations AS text[]), CAST(:committed AS timestamptz[])) WITH ORDINALITY
        AS u(snapshot_id, parent_snapshot_id, sequence_number, operation, summary,
             metadata_location, committed_at, n)
    ORDER BY u.n
    ON CONFLICT (table_id, snapshot_id) DO NOTHING
    RETURNING id
    """
)


def insert_events(
    session: Session,
    table_id: int,
    snapshots: list[Snapshot],
    *,
    source: str,
    current: Snapshot | None,
    metadata_location: str | None,
) -> list[int]:
    """Insert one event per snapshot in one statement (of one text, whatever the count), in
    the order given (ids follow it); the ids of those inserted (a (table, snapshot) already
    known is skipped)."""
    if not snapshots:
        return []
    fields = [snapshot_fields(snap) for snap in snapshots]
    return sorted(
        session.scalars(
            _INSERT_EVENTS,
            {
                "table_id": table_id,
                "source": source,
                "snapshot_ids": [f["snapshot_id"] for f in fields],
                "parents": [f["parent_snapshot_id"] for f in fields],
                "sequences": [f["sequence_number"] for f in fields],
                "operations": [f["operation"] for f in fields],
                "summaries": [json.dumps(f["summary"]) for f in fields],
                "locations": [metadata_location if s is current else None for s in snapshots],
                "committed": [f["committed_at"] for f in fields],
            },
        )
    )


def sync_table(
    session: Session, row: ManagedTable, table: Table, *, source: str, max_walk: int = MAX_WALK
) -> Ingested:
    """Record every commit of `table` not yet seen, walking back from the current snapshot.

    The walk stops at the first snapshot already recorded, so a missed
    notification is caught up by the next one (or by the poller). Registration
    passes max_walk=1: history before lakewarden managed the table is not replayed.

    `row` should be locked (refresh.ingest_commits does). When the table's metadata
    pointer is the one the row already holds, nothing changed: nothing is read and the row
    is not written (no UPDATE, no updated_at bump).
    """
    if row.metadata_location is not None and table.metadata_location == row.metadata_location:
        return Ingested([], row.current_snapshot_id)
    current = table.current_snapshot()
    unseen = unseen_snapshots(session, row.id, table, max_walk=max_walk)
    new_ids = insert_events(
        session,
        row.id,
        list(reversed(unseen)),  # oldest first, so ids follow commit order
        source=source,
        current=current,
        metadata_location=table.metadata_location,
    )
    row.metadata_location = table.metadata_location
    row.current_snapshot_id = current.snapshot_id if current else None
    row.updated_at = func.now()
    session.flush()
    return Ingested(new_ids, row.current_snapshot_id)


def list_events(session: Session, table_id: int, page: PageRequest) -> Page[TimelineEvent]:
    """The table's commits, newest first, each with what policy evaluation decided."""
    q = select(TimelineEvent).where(TimelineEvent.table_id == table_id)
    return keyset_page(session, q, TimelineEvent.id, page)


def event_for(session: Session, table_id: int, snapshot_id: int | None) -> TimelineEvent | None:
    """The event of one commit of the table, if recorded."""
    return session.scalars(
        select(TimelineEvent).where(
            TimelineEvent.table_id == table_id, TimelineEvent.snapshot_id == snapshot_id
        )
    ).one_or_none()
