"""Idempotent ingest of commits: one timeline event per (table, snapshot).

However many times a commit is reported (NOTIFY, webhook, poll) and however
many API replicas hear it, `INSERT ... ON CONFLICT DO NOTHING` keeps one row,
and only the inserter evaluates it, so each commit is evaluated once.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from pyiceberg.table.snapshots import Snapshot
from sqlalchemy import select, text
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from lakewarden.catalogs.metadata_view import TableRead, ancestor_ids
from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.db.paging import Page, PageRequest, keyset_page

# How far back one sync walks a table's history looking for unseen commits.
MAX_WALK = 1000
# The walk asks the database about this many snapshot ids first (most syncs find one new
# commit), then twice as many each round, up to MAX_CHUNK.
FIRST_CHUNK = 8
MAX_CHUNK = 256

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Sync:
    """One table to sync: its row (locked), the table as read from the catalog, and how far
    back its history is walked."""

    row: ManagedTable
    table: TableRead
    max_walk: int = MAX_WALK


_KNOWN = text(
    """
    SELECT e.table_id, e.snapshot_id FROM timeline_events e
    JOIN unnest(CAST(:table_ids AS bigint[]), CAST(:snapshot_ids AS bigint[])) AS u(t, s)
      ON e.table_id = u.t AND e.snapshot_id = u.s
    """
)


def known_snapshots(session: Session, pairs: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which (table id, snapshot id) pairs already have an event, in one statement (an
    indexed lookup per pair on the (table_id, snapshot_id) key, however long the history)."""
    if not pairs:
        return set()
    found = session.execute(
        _KNOWN,
        {"table_ids": [t for t, _ in pairs], "snapshot_ids": [s for _, s in pairs]},
    )
    return {(t, s) for t, s in found}


def unseen_snapshots(
    session: Session, table_id: int, table: TableRead, *, max_walk: int = MAX_WALK
) -> list[Snapshot]:
    """`unseen_of` one table."""
    return unseen_of(session, [(table_id, table, max_walk)])[0]


def unseen_of(session: Session, walks: list[tuple[int, TableRead, int]]) -> list[list[Snapshot]]:
    """The commits of each (table id, table, max walk) not recorded yet, newest first: each
    walked back from its current snapshot in chunks (FIRST_CHUNK ids, then doubling up to
    MAX_CHUNK), asking the database only which ids of the chunks it knows (one statement
    per round for every table) and stopping at a table's first known one. What it reads is
    bounded by the new commits (plus one chunk), never a table's whole history."""
    histories = [ancestor_ids(table, max_walk) for _, table, max_walk in walks]
    unseen: list[list[int]] = [[] for _ in walks]
    walking = set(range(len(walks)))
    size = FIRST_CHUNK
    while walking:
        chunks: dict[int, list[int]] = {}
        for i in sorted(walking):
            room = walks[i][2] - len(unseen[i])
            chunk = list(islice(histories[i], min(size, room))) if room > 0 else []
            if chunk:
                chunks[i] = chunk
            else:
                walking.discard(i)
        if not chunks:
            break
        known = known_snapshots(
            session, [(walks[i][0], snap_id) for i, c in chunks.items() for snap_id in c]
        )
        for i, chunk in chunks.items():
            for snap_id in chunk:
                if (walks[i][0], snap_id) in known:
                    walking.discard(i)
                    break
                unseen[i].append(snap_id)
        size = min(size * 2, MAX_CHUNK)
    # Only the unseen are parsed (a view parses a snapshot when asked for it).
    return [
        [snap for snap_id in ids if (snap := table.snapshot_by_id(snap_id)) is not None]
        for ids, (_, table, _) in zip(unseen, walks, strict=True)
    ]


# The rows travel as one JSON text (json.dumps, in C) rather than nine arrays: psycopg
# dumps an array element by element in Python, most of an ingest's client time at 1,000
# events a statement.
_INSERT_EVENTS = text(
    """
    INSERT INTO timeline_events (table_id, snapshot_id, parent_snapshot_id, sequence_number,
        operation, summary, metadata_location, source, committed_at, gap_before)
    SELECT (u.e->>0)::bigint, (u.e->>1)::bigint, (u.e->>2)::bigint, (u.e->>3)::bigint,
        u.e->>4, (u.e->5)::jsonb, u.e->>6, :source, (u.e->>7)::timestamptz,
        CASE WHEN json_typeof(u.e->8) = 'object' THEN (u.e->8)::jsonb END
    FROM json_array_elements(CAST(:rows AS json)) WITH ORDINALITY AS u(e, n)
    ORDER BY u.n
    ON CONFLICT (table_id, snapshot_id) DO NOTHING
    RETURNING id, table_id
    """
)


def insert_events(
    session: Session,
    events: list[tuple[int, Snapshot, str | None]],
    *,
    source: str,
    gaps: dict[tuple[int, int], dict[str, Any]] | None = None,
) -> dict[int, list[int]]:
    """Insert one event per (table id, snapshot, metadata location) in one statement (of
    one text, whatever the count), in the order given (ids follow it); the ids inserted,
    by table (a (table, snapshot) already known is skipped). `gaps`: the `gap_before` of
    an event, by (table id, snapshot id)."""
    if not events:
        return {}
    rows = []
    for table_id, snap, location in events:
        f = snapshot_fields(snap)
        rows.append(
            [
                table_id,
                f["snapshot_id"],
                f["parent_snapshot_id"],
                f["sequence_number"],
                f["operation"],
                f["summary"],
                location,
                f["committed_at"].isoformat(),
                (gaps or {}).get((table_id, snap.snapshot_id)),
            ]
        )
    out: dict[int, list[int]] = {}
    for event_id, table_id in session.execute(
        _INSERT_EVENTS, {"source": source, "rows": json.dumps(rows)}
    ):
        out.setdefault(table_id, []).append(event_id)
    return {table_id: sorted(ids) for table_id, ids in out.items()}


_MOVE_ROWS = text(
    """
    UPDATE managed_tables m SET metadata_location = u.location, current_snapshot_id = u.current,
        updated_at = now()
    FROM unnest(CAST(:ids AS bigint[]), CAST(:locations AS text[]), CAST(:currents AS bigint[]))
         AS u(id, location, current)
    WHERE m.id = u.id
    """
)


_RECORDED_SEQUENCES = text(
    """
    SELECT e.table_id, e.snapshot_id, e.sequence_number FROM timeline_events e
    JOIN unnest(CAST(:table_ids AS bigint[]), CAST(:snapshot_ids AS bigint[])) AS u(t, s)
      ON e.table_id = u.t AND e.snapshot_id = u.s
    """
)


def gaps_before(
    session: Session, syncs: list[Sync], unseen: list[list[Snapshot]]
) -> dict[tuple[int, int], dict[str, Any]]:
    """The gap before each sync's oldest unseen commit, by (table id, snapshot id): commits
    between it and the last one recorded that can never be read again (they expired from
    the table's metadata before lakewarden read it, or lie past the walk's bound). The
    event says so (`gap_before`) rather than let the timeline look whole.

    Only a walk that ran out of history without reaching a recorded commit is looked at
    (rare: a listener behind by more than the table's snapshot expiry), in one statement
    for every such table. A gap is certain when the oldest unseen commit names a parent
    never recorded (Java's expiry keeps parent ids); when it names none (pyiceberg's expiry
    drops them, as does a replaced table's history), the sequence numbers tell: the
    commits between the last recorded one and it, less the other branches' still in the
    metadata (a format-1 table has none: no gap is claimed)."""
    candidates: list[tuple[Sync, list[Snapshot]]] = []
    for s, snaps in zip(syncs, unseen, strict=True):
        if not snaps or s.max_walk <= 1 or s.row.current_snapshot_id is None:
            continue  # nothing new, a first read (history not replayed), or nothing before
        parent = snaps[-1].parent_snapshot_id
        if len(snaps) < s.max_walk and parent is not None and s.table.snapshot_by_id(parent):
            continue  # the walk stopped at a recorded commit (the common case: no query)
        candidates.append((s, snaps))
    if not candidates:
        return {}
    pairs = [
        (s.row.id, i)
        for s, snaps in candidates
        for i in (s.row.current_snapshot_id, snaps[-1].parent_snapshot_id)
        if i is not None
    ]
    recorded = {
        (t, snap): seq
        for t, snap, seq in session.execute(
            _RECORDED_SEQUENCES,
            {"table_ids": [t for t, _ in pairs], "snapshot_ids": [i for _, i in pairs]},
        )
    }
    gaps: dict[tuple[int, int], dict[str, Any]] = {}
    for s, snaps in candidates:
        oldest, table_id = snaps[-1], s.row.id
        gap: dict[str, Any] = {"last_recorded_snapshot_id": s.row.current_snapshot_id}
        parent = oldest.parent_snapshot_id
        if parent is not None:
            if (table_id, parent) in recorded:
                continue  # recorded, then expired: the timeline is whole
            gap["missing_parent_snapshot_id"] = parent
            gap["why"] = (
                f"more than {s.max_walk} new commits: older ones are past the walk's bound"
                if len(snaps) >= s.max_walk
                else "its parent had expired from the table's metadata before it was read"
            )
        else:
            last = recorded.get((table_id, s.row.current_snapshot_id))
            if not last or not oldest.sequence_number:
                continue  # format 1: no sequence numbers to tell by
            between = range(last + 1, oldest.sequence_number)
            elsewhere = sum(1 for x in s.table.metadata.snapshots if x.sequence_number in between)
            missing = len(between) - elsewhere
            if missing <= 0:
                continue  # a history that starts anew (a replaced table), or branches'
            gap["missing_commits_at_most"] = missing
            gap["why"] = (
                f"sequence numbers {last + 1} to {oldest.sequence_number - 1} were never "
                "read: expired from the table's metadata before it was read"
            )
        gaps[(table_id, oldest.snapshot_id)] = gap
    return gaps


def sync_table(
    session: Session, row: ManagedTable, table: TableRead, *, source: str, max_walk: int = MAX_WALK
) -> Ingested:
    """`sync_tables` of one table."""
    return sync_tables(session, [Sync(row, table, max_walk)], source=source)[0]


def sync_tables(session: Session, syncs: list[Sync], *, source: str) -> list[Ingested]:
    """Record every commit of each table not yet seen, walking back from its current
    snapshot; what each recorded, in order. A few statements for any number of tables: the
    known-snapshot lookups (one per round of the walk), one insert, one update of the rows.

    The walk stops at the first snapshot already recorded, so a missed
    notification is caught up by the next one (or by the poller). Registration
    passes max_walk=1: history before lakewarden managed the table is not replayed.

    The rows should be locked (refresh.ingest_batch does). When a table's metadata
    pointer is the one its row already holds, nothing changed: nothing is read and the row
    is not written (no UPDATE, no updated_at bump).
    """
    moved = [
        s
        for s in syncs
        if s.row.metadata_location is None or s.table.metadata_location != s.row.metadata_location
    ]
    unseen = unseen_of(session, [(s.row.id, s.table, s.max_walk) for s in moved])
    gaps = gaps_before(session, moved, unseen)
    events: list[tuple[int, Snapshot, str | None]] = []
    for s, snaps in zip(moved, unseen, strict=True):
        current = s.table.current_snapshot()
        for snap in reversed(snaps):  # oldest first, so ids follow commit order
            is_current = current is not None and snap.snapshot_id == current.snapshot_id
            location = s.table.metadata_location if is_current else None
            events.append((s.row.id, snap, location))
    new_ids = insert_events(session, events, source=source, gaps=gaps)
    for (table_id, snap_id), gap in gaps.items():
        log.warning(
            "table %d: commits before snapshot %d were never read (%s)",
            table_id,
            snap_id,
            gap["why"],
        )
    if moved:
        currents = [s.table.current_snapshot() for s in moved]
        session.execute(
            _MOVE_ROWS,
            {
                "ids": [s.row.id for s in moved],
                "locations": [s.table.metadata_location for s in moved],
                "currents": [c.snapshot_id if c else None for c in currents],
            },
        )
        for s, c in zip(moved, currents, strict=True):
            # The row as written (its updated_at, the database's clock, read when asked).
            set_committed_value(s.row, "metadata_location", s.table.metadata_location)
            set_committed_value(s.row, "current_snapshot_id", c.snapshot_id if c else None)
            session.expire(s.row, ["updated_at"])
    return [Ingested(new_ids.get(s.row.id, []), s.row.current_snapshot_id) for s in syncs]


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
