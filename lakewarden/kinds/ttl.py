"""TTL: remove rows whose event-time column is older than the retention.

Partition level (metadata only) when the partition spec transforms the column with
identity/hour/day/month/year: the cutoff is rounded down to a partition boundary, so a
partition partly inside retention is kept whole, and Iceberg drops whole files without
rewriting any. Row level otherwise: a row-level DELETE with the exact cutoff.
Never a row inside retention; a run that would remove too much is held, not run.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from lakewarden.catalog import TableRef
from lakewarden.kinds.base import JobResult, Kind, PlanOutcome, PlanRejected
from lakewarden.metadata import DataFile, read_files
from lakewarden.policy import TTLPolicy
from lakewarden.spark import sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ALIGNED = ("identity", "hour", "day", "month", "year")
COLUMN_TYPES = ("timestamptz", "timestamp", "date")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def boundary(cutoff: datetime, transform: str, column_type: str) -> datetime:
    """The newest partition boundary at or before `cutoff` for this transform."""
    if transform == "hour":
        return cutoff.replace(minute=0, second=0, microsecond=0)
    if transform == "day" or (transform == "identity" and column_type == "date"):
        return cutoff.replace(hour=0, minute=0, second=0, microsecond=0)
    if transform == "month":
        return cutoff.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if transform == "year":
        return cutoff.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    if transform == "identity":
        return cutoff  # one partition per value: rows before the cutoff fill whole partitions
    raise ValueError(f"transform {transform!r} does not align with time")


def as_datetime(value: Any, column_type: str) -> datetime:
    """A bound as pyiceberg decodes it (micros or days since epoch) as an aware datetime."""
    if column_type == "date":
        return EPOCH + timedelta(days=int(value))
    return EPOCH + timedelta(microseconds=int(value))


def plan_from_files(
    policy: TTLPolicy,
    column_type: str,
    aligned_transform: str | None,
    files: list[DataFile],
    snapshot_id: int | None,
    now: datetime,
) -> PlanOutcome:
    """Pure TTL planning over file bounds (unit-tested without a table)."""
    assert policy.column is not None and policy.retention_days is not None
    col = policy.column
    if snapshot_id is None or not files:
        return PlanOutcome(None, "table has no data: nothing to expire")
    cutoff = now - timedelta(days=policy.retention_days)
    if policy.level == "partition" and aligned_transform is None:
        return PlanOutcome(
            None,
            f"level=partition needs the table partitioned by a time transform of {col!r}; "
            "partition by it or use level=row",
        )
    level = "partition" if aligned_transform and policy.level != "row" else "row"
    if level == "partition":
        assert aligned_transform is not None
        cut = boundary(cutoff, aligned_transform, column_type)
    elif column_type == "date":
        cut = cutoff.replace(hour=0, minute=0, second=0, microsecond=0)  # keep the cutoff day
    else:
        cut = cutoff
    bounded = [
        (f, as_datetime(f.bounds[col][0], column_type), as_datetime(f.bounds[col][1], column_type))
        for f in files
        if col in f.bounds
    ]
    if len(bounded) < len(files):
        return PlanOutcome(
            None,
            f"{len(files) - len(bounded)} data file(s) lack statistics for {col!r}: "
            "cannot bound what a delete would remove, so nothing runs",
        )
    total = sum(f.records for f in files)
    newest = max(hi for _, _, hi in bounded)
    expired_rows = 0.0
    whole_files = 0
    for f, lo, hi in bounded:
        if hi < cut:
            expired_rows += f.records
            whole_files += 1
        elif lo < cut:
            span = (hi - lo).total_seconds() or 1.0
            expired_rows += f.records * (cut - lo).total_seconds() / span
    fraction = expired_rows / total if total else 0.0
    detail = (
        f"cutoff {cut.isoformat()} ({policy.retention_days:g} days, {level} level), "
        f"~{expired_rows:.0f} of {total} rows (~{fraction:.0%}), newest {newest.isoformat()}"
    )
    if newest < cut:
        return PlanOutcome(
            None,
            f"held: every row is older than the retention ({detail}); "
            "a TTL never empties a table on its own",
        )
    if fraction > policy.max_fraction:
        return PlanOutcome(
            None,
            f"held: would remove ~{fraction:.0%} > max_fraction "
            f"{policy.max_fraction:.0%} ({detail})",
        )
    if expired_rows == 0:
        return PlanOutcome(None, f"nothing older than the retention ({detail})")
    plan = {
        "action": "delete",
        "column": col,
        "column_type": column_type,
        "cutoff": cut.isoformat(),
        "level": level,
        "transform": aligned_transform,
        "estimated_rows": round(expired_rows),
        "estimated_fraction": round(fraction, 4),
        "files_entirely_expired": whole_files,
        "snapshot_id": snapshot_id,
    }
    return PlanOutcome(plan, f"expire rows: {detail}")


def plan(policy: TTLPolicy, table: Table, now: datetime) -> PlanOutcome:
    if not policy.column or policy.retention_days is None:
        return PlanOutcome(None, "TTL needs column and retention_days")
    field = table.schema().find_field(policy.column)
    kinds = {TimestamptzType: "timestamptz", TimestampType: "timestamp", DateType: "date"}
    column_type = next((v for k, v in kinds.items() if isinstance(field.field_type, k)), None)
    if column_type is None:
        return PlanOutcome(
            None,
            f"column {policy.column!r} is {field.field_type}, not a "
            "timestamp or date: TTL cannot use it",
        )
    aligned = next(
        (
            str(pf.transform)
            for pf in table.spec().fields
            if pf.source_id == field.field_id and str(pf.transform) in ALIGNED
        ),
        None,
    )
    files = read_files(table, [policy.column])
    return plan_from_files(policy, column_type, aligned, files.data, files.snapshot_id, now)


def delete_sql(catalog: str, ref: TableRef, plan: dict[str, Any]) -> str:
    """The DELETE for a TTL plan; the literal is rebuilt from a parsed datetime."""
    if plan.get("action") != "delete" or plan.get("level") not in ("partition", "row"):
        raise PlanRejected(f"not a TTL plan: {plan.get('action')}/{plan.get('level')}")
    column_type = plan.get("column_type")
    if column_type not in COLUMN_TYPES:
        raise PlanRejected(f"unsupported TTL column type {column_type!r}")
    cut = sql.aware_datetime(plan.get("cutoff"), "cutoff")
    cut = cut.astimezone(UTC)
    if column_type == "date":
        literal = f"DATE '{date(cut.year, cut.month, cut.day).isoformat()}'"
    elif column_type == "timestamp":
        literal = "TIMESTAMP_NTZ " + sql.timestamp_literal(cut).removeprefix("TIMESTAMP ")
    else:
        literal = sql.timestamp_literal(cut)
    column = sql.column(str(plan.get("column")))
    return f"DELETE FROM {_table(catalog, ref)} WHERE {column} < {literal}"


def _table(catalog: str, ref: TableRef) -> str:
    sql.table_arg(catalog, ref)  # validates the catalog name
    return ref.spark_name(catalog)


def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
    spark.sql(delete_sql(catalog, ref, plan)).collect()
    rows = spark.sql(
        f"SELECT snapshot_id, operation, summary FROM {ref.spark_name(catalog)}.snapshots "
        "WHERE operation IN ('delete', 'overwrite') ORDER BY committed_at DESC LIMIT 1"
    ).collect()
    if not rows:
        return JobResult({"deleted_records": 0}, None)
    summary = rows[0]["summary"] or {}
    metrics = {
        "deleted_records": int(summary.get("deleted-records", 0)),
        "deleted_data_files": int(summary.get("deleted-data-files", 0)),
        "added_data_files": int(summary.get("added-data-files", 0)),
        "metadata_only": int(summary.get("added-data-files", 0)) == 0,
    }
    return JobResult(metrics, int(rows[0]["snapshot_id"]))


KIND = Kind(name="ttl", plan=plan, run=run, swept=True)
