"""Idempotent ingest of commits: one timeline event per (table, snapshot).

However many times a commit is reported (NOTIFY, webhook, poll) and however
many API replicas hear it, `INSERT ... ON CONFLICT DO NOTHING` keeps one row,
and only the inserter evaluates it, so each commit is evaluated once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.db.paging import Page, PageRequest, keyset_page

# How far back one sync walks a table's history looking for unseen commits.
MAX_WALK = 1000


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


def insert_event(
    session: Session,
    table_id: int,
    fields: dict[str, Any],
    *,
    source: str,
    metadata_location: str | None,
) -> int | None:
    """Insert one event; None when (table, snapshot) is already known."""
    import json

    return session.execute(
        text(
            """
            INSERT INTO timeline_events (table_id, snapshot_id, parent_snapshot_id,
                sequence_number, operation, summary, metadata_location, source, committed_at)
            VALUES (:table_id, :snapshot_id, :parent_snapshot_id, :sequence_number, :operation,
                CAST(:summary AS jsonb), :metadata_location, :source, :committed_at)
            ON CONFLICT (table_id, snapshot_id) DO NOTHING
            RETURNING id
            """
        ),
        {
            **fields,
            "summary": json.dumps(fields["summary"]),
            "table_id": table_id,
            "source": source,
            "metadata_location": metadata_location,
        },
    ).scalar()


def sync_table(
    session: Session, row: ManagedTable, table: Table, *, source: str, max_walk: int = MAX_WALK
) -> Ingested:
    """Record every commit of `table` not yet seen, walking back from the current snapshot.

    The walk stops at the first snapshot already recorded, so a missed
    notification is caught up by the next one (or by the poller). Registration
    passes max_walk=1: history before lakewarden managed the table is not replayed.
    """
    metadata = table.metadata
    current = table.current_snapshot()
    known = set(
        session.scalars(select(TimelineEvent.snapshot_id).where(TimelineEvent.table_id == row.id))
    )
    unseen: list[Snapshot] = []
    snapshot = current
    while snapshot is not None and snapshot.snapshot_id not in known and len(unseen) < max_walk:
        unseen.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    new_ids: list[int] = []
    for snap in reversed(unseen):  # oldest first, so ids follow commit order
        event_id = insert_event(
            session,
            row.id,
            snapshot_fields(snap),
            source=source,
            metadata_location=table.metadata_location if snap is current else None,
        )
        if event_id is not None:
            new_ids.append(event_id)
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
