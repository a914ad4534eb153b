"""The one walker of an Iceberg table's history, and the one reading of a snapshot as a
`Commit` (from pyiceberg, Iceberg-Java over py4j, or a row of the `snapshots` table).

pyiceberg's `ancestors_of` walks a snapshot's parents in the metadata; Iceberg-Java's
table is walked the same way here (a job reads the metadata its own commit left, not a
Spark query of the snapshots table: a Spark job of its own). Every walk is bounded: a
caller says how far it looks back.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from lakewarden.formats.base import Commit
from lakewarden.formats.iceberg import finder

# How far back from a branch's head a job's commits are looked for (Iceberg-Java walks).
MAX_JOB_WALK = 1000


def of_pyiceberg(snapshot: Snapshot) -> Commit:
    summary: dict[str, str] = {}
    operation = None
    if snapshot.summary is not None:
        operation = snapshot.summary.operation.value
        summary = dict(snapshot.summary.additional_properties)
    return Commit(
        id=str(snapshot.snapshot_id),
        parent=None if snapshot.parent_snapshot_id is None else str(snapshot.parent_snapshot_id),
        seq=snapshot.sequence_number,
        at_ms=snapshot.timestamp_ms,
        operation=operation,
        summary=summary,
        native=snapshot,
    )


def of_java(snapshot: Any) -> Commit:
    """An Iceberg-Java Snapshot: its summary stays the py4j map (read key by key)."""
    parent = snapshot.parentId()
    return Commit(
        id=str(snapshot.snapshotId()),
        parent=None if parent is None else str(parent),
        seq=int(snapshot.sequenceNumber()),
        at_ms=int(snapshot.timestampMillis()),
        operation=snapshot.operation(),
        summary=snapshot.summary(),
        native=snapshot,
    )


def of_row(row: Any) -> Commit:
    """A row of Spark's `<table>.snapshots` metadata table."""
    at: datetime = row["committed_at"]
    fields = row.asDict() if hasattr(row, "asDict") else dict(row)
    parent = fields.get("parent_id")
    return Commit(
        id=str(row["snapshot_id"]),
        parent=None if parent is None else str(parent),
        seq=None,
        at_ms=int(at.astimezone(UTC).timestamp() * 1000) if at.tzinfo else _naive_ms(at),
        operation=fields.get("operation"),
        summary=fields.get("summary") or {},
        native=row,
    )


def _naive_ms(at: datetime) -> int:
    return int(at.replace(tzinfo=UTC).timestamp() * 1000)


def ancestors(table: Table, head: Snapshot | None, limit: int | None = None) -> Iterator[Snapshot]:
    """`head` and its ancestors still in the metadata, newest first (at most `limit`)."""
    if head is None:
        return iter(())
    return islice(ancestors_of(head, table.metadata), limit)


def branch_history(table: Table, branch_head: int, limit: int | None = None) -> Iterator[Commit]:
    """The commits of the branch whose head is snapshot `branch_head`, newest first."""
    head = table.snapshot_by_id(branch_head)
    return (of_pyiceberg(s) for s in ancestors(table, head, limit))


def java_history(
    table: Any, branch: str, stop_at: int | None = None, limit: int = MAX_JOB_WALK
) -> list[Commit]:
    """The commits of `branch` of an Iceberg-Java `table`, newest first, down to (not
    including) snapshot `stop_at`, at most `limit`."""
    out: list[Commit] = []
    snapshot = table.snapshot(branch)
    while snapshot is not None and len(out) < limit:
        if stop_at is not None and int(snapshot.snapshotId()) == stop_at:
            break
        commit = of_java(snapshot)
        out.append(commit)
        snapshot = table.snapshot(int(commit.parent)) if commit.parent is not None else None
    return out


def snapshots_table(spark: Any, spark_name: str, where: str = "") -> list[Commit]:
    """The commits Spark's `<table>.snapshots` metadata table lists (every branch's), read
    in one Spark query; `where` is a fixed condition of the caller's (never user text)."""
    rows = spark.sql(
        "SELECT snapshot_id, parent_id, committed_at, operation, summary "
        f"FROM {spark_name}.snapshots{f' WHERE {where}' if where else ''}"
    ).collect()
    return [of_row(r) for r in rows]


def newest_rewrite(spark: Any, spark_name: str) -> int | None:
    """The newest `replace` commit of the table: the guess at ours where a commit carries
    no mark (outside a scheduled job; Iceberg's position-delete procedure takes no snapshot
    properties). Writers do not make a `replace`."""
    found = finder.newest(
        snapshots_table(spark, spark_name, "operation = 'replace'"), finder.is_rewrite
    )
    return int(found.id) if found is not None else None
