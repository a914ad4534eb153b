"""TTL: remove rows whose event-time column is older than the retention.

Partition level (metadata only) when the current partition spec transforms the column with
identity/hour/day/month/year: the cutoff is rounded down to a partition boundary, so a
partition partly inside retention is kept whole, and Iceberg drops whole files without
rewriting any. Row level otherwise: a row-level DELETE with the exact cutoff.

Never a row inside retention: every cutoff is at or before `now - retention_days`, and the
run checks that again against its own clock. A run that would remove every row, or more
than `max_fraction` of them, is held (skipped with a reason starting "held:"), not run.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DateType, IcebergType, TimestampType, TimestamptzType

from lakewarden.catalog import TableRef
from lakewarden.kinds.base import JobResult, Kind, PlanOutcome, PlanRejected
from lakewarden.metadata import DataFile, read_files
from lakewarden.policy import TTLPolicy
from lakewarden.spark import sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ALIGNED = ("identity", "hour", "day", "month", "year")
COLUMN_TYPES = ("timestamptz", "timestamp", "date")
LEVELS = ("partition", "row")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ESTIMATE = (
    "files entirely before the cutoff count fully; files straddling it count in proportion "
    "to the part of their [min, max] time span before the cutoff"
)


# --- what the table offers -------------------------------------------------------------


def column_type_of(field_type: IcebergType) -> str | None:
    """The TTL column type lakewarden supports, or None."""
    if isinstance(field_type, TimestamptzType):
        return "timestamptz"
    if isinstance(field_type, TimestampType):
        return "timestamp"
    if isinstance(field_type, DateType):
        return "date"
    return None


def aligned_transform(spec: PartitionSpec, source_id: int) -> str | None:
    """The transform of the spec's field on the column, if whole partitions align with time."""
    for pf in spec.fields:
        if pf.source_id == source_id and str(pf.transform) in ALIGNED:
            return str(pf.transform)
    return None


def ttl_target(schema: Schema, spec: PartitionSpec, column: str) -> tuple[str, str | None] | str:
    """(column type, aligned transform or None), or the reason TTL cannot use the column."""
    try:
        field = schema.find_field(column)
    except ValueError:
        return f"the table has no column {column!r}: TTL cannot run"
    column_type = column_type_of(field.field_type)
    if column_type is None:
        return (
            f"column {column!r} is {field.field_type}, not a timestamp, timestamptz or date: "
            "TTL cannot use it"
        )
    return column_type, aligned_transform(spec, field.field_id)


# --- time arithmetic (all in UTC, as Iceberg's transforms are) ------------------------


def boundary(cutoff: datetime, transform: str, column_type: str) -> datetime:
    """The newest partition boundary at or before `cutoff` for this transform (UTC)."""
    cutoff = cutoff.astimezone(UTC)
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


def retention_cutoff(now: datetime, retention_days: float, column_type: str) -> datetime:
    """`now - retention_days` in UTC. A date is a whole day: the day the cutoff falls in is
    partly inside retention, so for dates the cutoff is that day's start (the day is kept)."""
    cut = (now - timedelta(days=retention_days)).astimezone(UTC)
    if column_type == "date":
        cut = cut.replace(hour=0, minute=0, second=0, microsecond=0)
    return cut


def as_datetime(value: Any, column_type: str) -> datetime:
    """A bound as pyiceberg decodes it (micros or days since epoch) as an aware datetime.
    `timestamp` (no zone) values are read as UTC, as Spark's session here does."""
    if column_type == "date":
        return EPOCH + timedelta(days=int(value))
    return EPOCH + timedelta(microseconds=int(value))


# --- planning ---------------------------------------------------------------------------


def plan_from_files(
    policy: TTLPolicy,
    column_type: str,
    aligned: str | None,
    files: list[DataFile],
    snapshot_id: int | None,
    now: datetime,
) -> PlanOutcome:
    """Pure TTL planning over file bounds (unit-tested without a table)."""
    if not policy.column or policy.retention_days is None:
        return PlanOutcome(None, "TTL needs column and retention_days")
    col = policy.column
    if column_type not in COLUMN_TYPES:
        return PlanOutcome(None, f"unsupported TTL column type {column_type!r}")
    if snapshot_id is None or not files:
        return PlanOutcome(None, "table has no data: nothing to expire")
    if policy.level == "partition" and aligned is None:
        return PlanOutcome(
            None,
            f"level=partition needs the current partition spec to partition by "
            f"{col!r} (identity, hour, day, month or year); partition by it or use level=row",
        )
    level = "partition" if aligned is not None and policy.level != "row" else "row"
    retention = retention_cutoff(now, policy.retention_days, column_type)
    cut = (
        boundary(retention, aligned, column_type) if aligned and level == "partition" else retention
    )
    assert cut <= retention  # never a row inside retention

    bounded = [
        (f, as_datetime(f.bounds[col][0], column_type), as_datetime(f.bounds[col][1], column_type))
        for f in files
        if col in f.bounds
    ]
    if len(bounded) < len(files):
        return PlanOutcome(
            None,
            f"{len(files) - len(bounded)} of {len(files)} data file(s) lack statistics (min/max) "
            f"for {col!r}: cannot bound what a delete would remove, so nothing runs "
            "(keep column metrics for it: write.metadata.metrics.column.<col>=full)",
        )
    # a date bound covers its whole day
    unit = timedelta(days=1) if column_type == "date" else timedelta(0)
    total = sum(_live(f) for f in files)
    newest = max(hi for _, _, hi in bounded)
    oldest = min(lo for _, lo, _ in bounded)
    expired = 0.0
    whole = straddling = 0
    for f, lo, hi in bounded:
        if hi < cut:
            expired += _live(f)
            whole += 1
        elif lo < cut:
            straddling += 1
            expired += _live(f) * (cut - lo) / (hi - lo + unit)
    fraction = expired / total if total else 0.0
    pct = f"{fraction:.1%}"
    rounded = (
        f", retention cutoff {retention.isoformat()} rounded down to the {aligned}"
        if cut != retention
        else ""
    )
    where = (
        f"cutoff {cut.isoformat()} ({level} level{rounded}; "
        f"retention {policy.retention_days:g} days)"
    )
    detail = (
        f"{where}; ~{expired:.0f} of {total:.0f} rows (~{pct}), "
        f"{whole} file(s) entirely expired, {straddling} straddling; "
        f"oldest {oldest.isoformat()}, newest {newest.isoformat()}"
    )
    if newest < retention:
        return PlanOutcome(
            None,
            f"held: every row is older than the retention (newest {newest.isoformat()} < "
            f"retention cutoff {retention.isoformat()}): running would remove every row; "
            "a TTL never empties a table on its own (has the writer stopped?)",
        )
    if fraction > policy.max_fraction:
        return PlanOutcome(
            None,
            f"held: would remove ~{pct} > max_fraction {policy.max_fraction:.0%} of the rows "
            f"({detail}; estimate: {ESTIMATE})",
        )
    if whole == 0 and straddling == 0:
        return PlanOutcome(None, f"nothing older than the cutoff: {detail}")
    plan = {
        "action": "delete",
        "column": col,
        "column_type": column_type,
        "cutoff": cut.isoformat(),  # the DELETE removes rows with column < cutoff
        "retention_cutoff": retention.isoformat(),
        "retention_days": policy.retention_days,
        "level": level,
        "transform": aligned if level == "partition" else None,
        "estimated_rows": round(expired),
        "estimated_fraction": round(fraction, 4),
        "estimate_method": ESTIMATE,
        "rows_before": round(total),
        "files_before": len(files),
        "files_entirely_expired": whole,
        "files_straddling": straddling,
        "expected_files_after": len(files) - whole,
        # Iceberg drops whole files without rewriting when no file straddles the cutoff
        "expected_metadata_only": straddling == 0,
        "oldest": oldest.isoformat(),
        "newest": newest.isoformat(),
        "snapshot_id": snapshot_id,
    }
    reason = f"expire rows: {detail}"
    if level == "partition" and straddling:
        reason += (
            f" ({straddling} file(s) written under an older partition spec straddle the "
            "boundary: Iceberg rewrites those)"
        )
    return PlanOutcome(plan, reason)


def _live(f: DataFile) -> float:
    return max(0.0, f.records - f.deleted_records)


def plan(policy: TTLPolicy, table: Table, now: datetime) -> PlanOutcome:
    if not policy.column or policy.retention_days is None:
        return PlanOutcome(None, "TTL needs column and retention_days")
    target = ttl_target(table.schema(), table.spec(), policy.column)
    if isinstance(target, str):
        return PlanOutcome(None, target)
    column_type, aligned = target
    files = read_files(table, [policy.column])
    return plan_from_files(policy, column_type, aligned, files.data, files.snapshot_id, now)


# --- running ----------------------------------------------------------------------------


def cutoff_literal(column_type: str, cut: datetime) -> str:
    """A typed SQL literal for the cutoff, built from a datetime (never from plan text).

    `timestamp` (no zone) columns need a TIMESTAMP_NTZ literal: against a TIMESTAMP literal
    Spark casts the column, the predicate no longer reaches Iceberg, and even a delete of
    whole partitions becomes a full copy-on-write rewrite.
    """
    cut = cut.astimezone(UTC)
    if column_type == "date":
        return f"DATE '{date(cut.year, cut.month, cut.day).isoformat()}'"
    if column_type == "timestamp":
        return "TIMESTAMP_NTZ " + sql.timestamp_literal(cut).removeprefix("TIMESTAMP ")
    if column_type == "timestamptz":
        return sql.timestamp_literal(cut)
    raise PlanRejected(f"unsupported TTL column type {column_type!r}")


def delete_sql(
    catalog: str, ref: TableRef, plan: dict[str, Any], now: datetime | None = None
) -> str:
    """The DELETE for a TTL plan (pure; tested without Spark). With `now`, a cutoff inside
    the plan's retention (a tampered or mistaken plan) is refused."""
    if plan.get("action") != "delete" or plan.get("level") not in LEVELS:
        raise PlanRejected(f"not a TTL plan: {plan.get('action')}/{plan.get('level')}")
    column_type = plan.get("column_type")
    if column_type not in COLUMN_TYPES:
        raise PlanRejected(f"unsupported TTL column type {column_type!r}")
    cut = sql.aware_datetime(plan.get("cutoff"), "cutoff")
    if now is not None:
        days = plan.get("retention_days")
        if isinstance(days, bool) or not isinstance(days, int | float) or not days > 0:
            raise PlanRejected(f"invalid retention_days {days!r}")
        if not math.isfinite(days) or cut > now - timedelta(days=days):
            raise PlanRejected(
                f"cutoff {cut.isoformat()} is inside the retention of {days:g} days "
                f"(now {now.isoformat()}): refusing to remove rows inside retention"
            )
    column = sql.column(str(plan.get("column")))
    literal = cutoff_literal(str(column_type), cut)
    sql.table_arg(catalog, ref)  # validates the catalog name
    return f"DELETE FROM {ref.spark_name(catalog)} WHERE {column} < {literal}"


def _snapshots(spark: SparkSession, catalog: str, ref: TableRef) -> list[Any]:
    return spark.sql(
        f"SELECT snapshot_id, committed_at, operation, summary "
        f"FROM {ref.spark_name(catalog)}.snapshots"
    ).collect()


def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
    statement = delete_sql(catalog, ref, plan, now=datetime.now(UTC))
    before = {r["snapshot_id"] for r in _snapshots(spark, catalog, ref)}
    spark.sql(statement).collect()
    # Our commit: new since we started, a delete (whole files) or an overwrite (files
    # rewritten), made by this Spark application. A writer's commit is not ours.
    app = spark.sparkContext.applicationId
    ours = sorted(
        (
            r
            for r in _snapshots(spark, catalog, ref)
            if r["snapshot_id"] not in before
            and r["operation"] in ("delete", "overwrite")
            and (r["summary"] or {}).get("spark.app.id", app) == app
        ),
        key=lambda r: r["committed_at"],
    )
    base = {"level": plan["level"], "cutoff": plan["cutoff"], "statement": statement}
    if not ours:
        return JobResult({**base, "deleted_records": 0, "note": "no commit"}, None)
    snap = ours[-1]
    summary = snap["summary"] or {}

    def n(key: str) -> int:
        return int(summary.get(key, 0) or 0)

    added_deletes = n("added-delete-files")
    metrics = {
        **base,
        "operation": snap["operation"],
        # an overwrite removes whole files and re-adds the rows it keeps of them
        "deleted_records": n("deleted-records") - n("added-records") + n("added-position-deletes"),
        "deleted_data_files": n("deleted-data-files"),
        "added_data_files": n("added-data-files"),
        "rewritten_rows_kept": n("added-records"),
        "added_delete_files": added_deletes,
        "removed_bytes": n("removed-files-size"),
        # whole files dropped, nothing written: what partition level promises
        "metadata_only": n("added-data-files") == 0 and added_deletes == 0,
    }
    return JobResult(metrics, int(snap["snapshot_id"]))


KIND = Kind(name="ttl", plan=plan, run=run, swept=True)
