"""What readiness reads of a Delta table's log (`lakewarden.readiness`): the type of a
partition column, and the partition values each version's data changes touched. A version
touches the partitions of the files it added or removed with `dataChange` true; an
OPTIMIZE or a purge (`dataChange` false: the same rows in other files) touches none."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lakewarden.formats.base import Commit
from lakewarden.formats.delta.timeline import DeltaTimeline


class NotAPartitionColumn(ValueError):
    """The column is missing, or the table is not partitioned by it: say which it is."""


def partition_column_type(timeline: DeltaTimeline, column: str) -> str:
    """The Delta type (`date`, `timestamp`, `string`, ...) of `column`, a partition column
    of the table's newest version; NotAPartitionColumn says what is wrong."""
    table = timeline.open_table()
    partitioned = list(table.metadata().partition_columns or [])
    if column not in partitioned:
        how = ", ".join(partitioned) or "none"
        raise NotAPartitionColumn(
            f"readiness.partition: the Delta table is not partitioned by {column!r} "
            f"(its partition columns: {how})"
        )
    field = next(f for f in table.schema().fields if f.name == column)
    return str(getattr(field.type, "type", field.type))


def touched_values(commit: Commit, column: str) -> set[str | None]:
    """The values of `column` (as the log spells them; None: null) of the files `commit`
    (a `DeltaTimeline` commit) added or removed as a data change."""
    actions: Iterable[dict[str, Any]] = commit.native or []
    out: set[str | None] = set()
    for action in actions:
        file = action.get("add") or action.get("remove")
        if file is None or file.get("dataChange") is False:
            continue
        values = file.get("partitionValues") or {}
        if column in values:
            out.add(values[column])
    return out
