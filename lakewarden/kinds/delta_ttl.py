"""TTL on a Delta table (issue 29), planned from its log with delta-rs (no JVM) by Iceberg's
own TTL arithmetic and holds (`kinds.ttl.plan_from_files`); run as Delta's `DELETE`
(`jobs.delta`).

Partition level (metadata only: Delta removes whole files and writes none) when the table
is partitioned on the TTL column itself, or on a date column Delta generates from it
(`CAST(ts AS DATE)` or `to_date(ts)`): the cutoff is rounded down to a partition boundary
and the DELETE's predicate names the partition column alone. Row level otherwise: a
`DELETE … WHERE column < cutoff`.

The rows to expire are counted exactly by delta-rs (`scan()`, deletion vectors applied);
the job counts again with Spark right before deleting.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa

from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.iceberg.partitions import EPOCH
from lakewarden.kinds import ttl
from lakewarden.kinds.base import PlanOutcome
from lakewarden.metadata import DataFile
from lakewarden.outcomes import PlanRejected
from lakewarden.policy.model import MAIN_BRANCH, TTLPolicy
from lakewarden.spark import sql

# Delta's types as the TTL arithmetic names them: Delta's `timestamp` is instant (UTC).
COLUMN_TYPES = {"timestamp": "timestamptz", "timestamp_ntz": "timestamp", "date": "date"}
GENERATION = "delta.generationExpression"
_TO_DATE = re.compile(
    r"^\s*(?:CAST\s*\(\s*`?(\w+)`?\s+AS\s+DATE\s*\)|TO_DATE\s*\(\s*`?(\w+)`?\s*\))\s*$",
    re.IGNORECASE,
)


def derived_from(expression: str) -> str | None:
    """The column a generated date column is the day of (`CAST(ts AS DATE)`,
    `to_date(ts)`), or None."""
    match = _TO_DATE.match(expression or "")
    return (match.group(1) or match.group(2)) if match else None


def ttl_target(
    types: dict[str, str], generated: dict[str, str], partition_columns: list[str], column: str
) -> tuple[str, str | None, str | None] | str:
    """(column type, the partition column that aligns with it or None, its transform), or
    why TTL cannot use the column. `types`: column -> Delta type; `generated`: column ->
    its generation expression."""
    if column not in types:
        return f"the table has no column {column!r}: TTL cannot run"
    column_type = COLUMN_TYPES.get(types[column])
    if column_type is None:
        return (
            f"column {column!r} is {types[column]}, not a timestamp, timestamp_ntz or date: "
            "TTL cannot use it"
        )
    if column in partition_columns:
        return column_type, column, "identity"
    for part in partition_columns:
        if types.get(part) == "date" and derived_from(generated.get(part, "")) == column:
            return column_type, part, "day"
    return column_type, None, None


def encode(value: Any, column_type: str) -> int:
    """A bound as the TTL arithmetic reads one (`ttl.as_datetime`): days since the epoch
    for a date, microseconds for a timestamp (one without a zone read as UTC)."""
    if column_type == "date":
        day = value.date() if isinstance(value, datetime) else value
        return (day - date(1970, 1, 1)).days
    stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
    delta = stamp.astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def data_files(
    rows: list[dict[str, Any]], column: str, column_type: str, partition_column: str | None
) -> list[DataFile]:
    """The add actions as TTL's files: the column's bounds from the writer's min/max stats,
    or the partition value when the column is the partition column (Delta keeps no stats
    for a partition column). Their rows are counted exactly (`_count`), not from these."""
    files = []
    for row in rows:
        if partition_column == column:
            lo = hi = row.get(f"partition.{column}")
        else:
            lo, hi = row.get(f"min.{column}"), row.get(f"max.{column}")
        bounds = {}
        if lo is not None and hi is not None:
            bounds[column] = (encode(lo, column_type), encode(hi, column_type))
        records = int(row.get("num_records") or 0)
        files.append(DataFile(row["path"], int(row["size_bytes"]), records, 0, (), bounds))
    return files


def _count(timeline: DeltaTimeline, version: int, column: str, column_type: str) -> ttl.Counter:
    def count(cut: datetime) -> tuple[int, int]:
        """Exact (rows older than the cutoff, all rows) at the planned version: the column
        read by delta-rs' `scan()`, deletion vectors applied."""
        import pyarrow.compute as pc

        scan = timeline.table(version).scan(columns=[column])
        values = pa.RecordBatchReader.from_stream(scan).read_all().column(column)
        if column_type == "date":
            literal = pa.scalar(cut.date(), values.type)
        else:
            plain = cut.astimezone(UTC)
            literal = pa.scalar(
                plain if values.type.tz else plain.replace(tzinfo=None), values.type
            )
        older = pc.sum(pc.less(values, literal)).as_py() or 0
        return int(older), len(values)

    return count


def plan(policy: TTLPolicy, timeline: DeltaTimeline, now: datetime) -> PlanOutcome:
    """A Delta table's TTL plan, or why not (`kinds.ttl.plan_from_files`' holds)."""
    if not policy.column or policy.retention_days is None:
        return PlanOutcome(None, "TTL needs column and retention_days")
    if policy.branch != MAIN_BRANCH:
        return PlanOutcome(None, f"a Delta table has no branches: TTL of {policy.branch!r}")
    table = timeline.open_table()
    fields = table.schema().fields
    types = {f.name: str(getattr(f.type, "type", f.type)) for f in fields}
    generated = {f.name: str(f.metadata.get(GENERATION, "")) for f in fields}
    partition_columns = list(table.metadata().partition_columns or [])
    target = ttl_target(types, generated, partition_columns, policy.column)
    if isinstance(target, str):
        return PlanOutcome(None, target)
    column_type, partition_column, transform = target
    rows = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    files = data_files(rows, policy.column, column_type, partition_column)
    version = table.version()
    outcome = ttl.plan_from_files(
        policy,
        column_type,
        transform,
        files,
        version if files else None,
        now,
        count=_count(timeline, version, policy.column, column_type),
    )
    if outcome.plan is None:
        return outcome
    level = outcome.plan["level"]
    found = {
        **outcome.plan,
        "format": "delta",
        "path": timeline.path,
        "version": version,
        # the column the DELETE's predicate names: the partition column at partition level
        "partition_column": partition_column if level == "partition" else None,
        # Delta drops whole files when the predicate names partition columns alone
        "expected_metadata_only": level == "partition",
    }
    return PlanOutcome(found, outcome.reason)


def predicate(plan: dict[str, Any], now: datetime | None = None) -> str:
    """The DELETE's predicate for a Delta TTL plan (pure): at partition level on a
    generated date column, `day < DATE '…'` (the cutoff is a day's start, so the two say
    the same in UTC, the session's zone); else `column < cutoff`. With `now`, a cutoff
    inside the plan's retention is refused."""
    cut = ttl.checked_cutoff(plan, now)
    column_type = str(plan["column_type"])
    part = plan.get("partition_column")
    if plan["level"] == "partition" and part and part != plan.get("column"):
        if cut != cut.replace(hour=0, minute=0, second=0, microsecond=0):
            raise PlanRejected(f"cutoff {cut.isoformat()} is not a day's start for {part!r}")
        return f"{sql.column(str(part))} < {ttl.cutoff_literal('date', cut)}"
    if plan["level"] == "partition" and part != plan.get("column"):
        raise PlanRejected("a partition-level Delta TTL plan names no partition column")
    return f"{sql.column(str(plan['column']))} < {ttl.cutoff_literal(column_type, cut)}"
