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
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from pyiceberg.expressions import LessThan
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DateType, IcebergType, TimestampType, TimestamptzType

from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.iceberg import finder, history, partitions
from lakewarden.formats.iceberg.partitions import EPOCH
from lakewarden.formats.iceberg.table import open_table
from lakewarden.kinds.base import JobResult, Kind, PlanOutcome
from lakewarden.metadata import DataFile, read_files
from lakewarden.outcomes import JobHeld, PlanRejected, VerificationFailed
from lakewarden.policy.model import MAIN_BRANCH, REF_NAME, TTLPolicy
from lakewarden.refs import tag_max_ref_age_ms
from lakewarden.spark import commits, sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ALIGNED = ("identity", "hour", "day", "month", "year")
COLUMN_TYPES = ("timestamptz", "timestamp", "date")
LEVELS = ("partition", "row")
# Tags the delete of a run outside a scheduled job (no task id): how it finds its own commit.
RUN_KEY = "lakewarden.run-id"
EXACT = "exact counts (pyiceberg scan filtered on the cutoff; deletes applied)"
Counter = Callable[[datetime], tuple[int, int]]
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
    return partitions.micros(int(value))


# --- planning ---------------------------------------------------------------------------


def plan_from_files(
    policy: TTLPolicy,
    column_type: str,
    aligned: str | None,
    files: list[DataFile],
    snapshot_id: int | None,
    now: datetime,
    count: Counter | None = None,
) -> PlanOutcome:
    """TTL planning over file bounds (pure without `count`; unit-tested without a table).

    `count(cutoff)` returns the exact (rows older than the cutoff, live rows). With it, the
    holds judge exact numbers; without it (explain, health), a linear estimate over file
    bounds, which can be wrong either way."""
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
    method = ESTIMATE
    if count is not None and (whole or straddling):
        exact_expired, exact_total = count(cut)
        expired, total, method = float(exact_expired), float(exact_total), EXACT
    approx = "" if method == EXACT else "~"
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
        f"{where}; {approx}{expired:.0f} of {total:.0f} rows ({approx}{pct}), "
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
    if method == EXACT and total and expired >= total:
        return PlanOutcome(
            None,
            f"held: every row is older than the cutoff ({detail}): running would remove "
            "every row; a TTL never empties a table on its own (has the writer stopped?)",
        )
    if fraction > policy.max_fraction:
        return PlanOutcome(
            None,
            f"held: would remove {approx}{pct} > max_fraction {policy.max_fraction:.0%} of "
            f"the rows ({detail}; {method})",
        )
    if (whole == 0 and straddling == 0) or (method == EXACT and expired == 0):
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
        "estimate_method": method,
        # what the job counts again right before deleting, and holds on
        "rows_to_delete": round(expired) if method == EXACT else None,
        "max_fraction": policy.max_fraction,
        "undo_retention_days": policy.undo_retention_days,
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
    branch = None if policy.branch == MAIN_BRANCH else policy.branch
    if branch is not None and branch not in branches(table):
        return PlanOutcome(None, f"the table has no branch {branch!r}: TTL cannot run on it")
    files = read_files(table, [policy.column], ref=branch)
    column = policy.column

    def count(cut: datetime) -> tuple[int, int]:
        """Exact counts with pyiceberg: record counts for files the filter covers whole
        (by partition), the rows themselves for the rest; deletes applied."""
        fields = (column,)
        snap = files.snapshot_id
        older = table.scan(
            row_filter=LessThan(column, pyiceberg_literal(column_type, cut)),  # type: ignore[call-arg, arg-type]
            selected_fields=fields,
            snapshot_id=snap,
        ).count()
        return older, table.scan(selected_fields=fields, snapshot_id=snap).count()

    # pyiceberg's scan refuses equality deletes (as Flink writes them): plan on the estimate
    # over file bounds, which the job's exact count (Spark applies every delete) then checks
    # and holds on before it deletes anything.
    unreadable = any(d.kind == "equality" for d in files.deletes)
    outcome = plan_from_files(
        policy,
        column_type,
        aligned,
        files.data,
        files.snapshot_id,
        now,
        count=None if unreadable else count,
    )
    if unreadable:
        outcome = PlanOutcome(
            outcome.plan,
            f"{outcome.reason} (estimated: the table holds equality deletes, which pyiceberg "
            "cannot read; the job counts exactly with Spark before deleting)",
        )
    if outcome.plan is None or branch is None:
        return outcome
    return PlanOutcome({**outcome.plan, "branch": branch}, f"branch {branch}: {outcome.reason}")


def pyiceberg_literal(column_type: str, cut: datetime) -> str:
    """The cutoff as pyiceberg binds it to the column's type."""
    cut = cut.astimezone(UTC)
    if column_type == "date":
        return cut.date().isoformat()
    if column_type == "timestamp":
        return cut.replace(tzinfo=None).isoformat()
    return cut.isoformat()


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
    if column_type in ("timestamp", "timestamptz"):
        return partitions.timestamp_sql(cut, column_type)
    raise PlanRejected(f"unsupported TTL column type {column_type!r}")


def delete_sql(
    catalog: str, ref: TableRef, plan: dict[str, Any], now: datetime | None = None
) -> str:
    """The DELETE for a TTL plan (pure; tested without Spark). With `now`, a cutoff inside
    the plan's retention (a tampered or mistaken plan) is refused."""
    cut = checked_cutoff(plan, now)
    column = sql.column(str(plan.get("column")))
    literal = cutoff_literal(str(plan["column_type"]), cut)
    sql.table_arg(catalog, ref)  # validates the catalog name
    return f"DELETE FROM {target_table(catalog, ref, plan)} WHERE {column} < {literal}"


def checked_cutoff(plan: dict[str, Any], now: datetime | None = None) -> datetime:
    """A TTL plan's cutoff, its action, level and column type checked (every format's TTL
    job). With `now`, a cutoff inside the plan's retention (a tampered or mistaken plan)
    is refused."""
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
    return cut


def hold_if_too_much(
    counted: int, total: int, max_fraction: float, metrics: dict[str, Any]
) -> None:
    """The run-time guard of every format's TTL, on the exact count taken right before the
    delete: JobHeld (the task skipped, `metrics` kept) if it would empty the table or remove
    more than `max_fraction` of its rows."""
    if total and counted >= total:
        raise JobHeld(
            f"held: all {total} rows would go at run time: a TTL never empties a table on its own",
            metrics,
        )
    if total and counted / total > max_fraction:
        raise JobHeld(
            f"held: the delete would remove {counted} of {total} rows ({counted / total:.1%}) "
            f"> max_fraction {max_fraction:.0%} (exact count at run time)",
            metrics,
        )


def branches(table: Table) -> set[str]:
    return open_table(table).refs().branches()


def branch_of(plan: dict[str, Any]) -> str:
    """The branch a TTL plan deletes from (main when the plan names none)."""
    branch = plan.get("branch", MAIN_BRANCH)
    if not isinstance(branch, str) or not re.fullmatch(REF_NAME, branch):
        raise PlanRejected(f"invalid branch {branch!r}")
    return branch


def target_table(catalog: str, ref: TableRef, plan: dict[str, Any]) -> str:
    """The table the DELETE and its counts act on: the table (main), or its branch as
    Spark names one (`t`.`branch_<name>`)."""
    branch = branch_of(plan)
    name = ref.spark_name(catalog)
    return name if branch == MAIN_BRANCH else f"{name}.`branch_{branch}`"


def _snapshots(spark: SparkSession, catalog: str, ref: TableRef) -> list[Any]:
    return [c.native for c in history.snapshots_table(spark, ref.spark_name(catalog))]


def _rows_at(spark: SparkSession, name: str, snapshot_id: int | None) -> int:
    """Live rows of the table at a snapshot (deletes applied); 0 before the first."""
    if snapshot_id is None:
        return 0
    row = spark.sql(f"SELECT count(*) AS n FROM {name} VERSION AS OF {int(snapshot_id)}")
    return int(row.collect()[0]["n"])


def max_fraction_of(plan: dict[str, Any]) -> float:
    value = plan.get("max_fraction")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise PlanRejected(f"invalid max_fraction {value!r}")
    return float(value)


def _undo_days(plan: dict[str, Any]) -> int:
    value = plan.get("undo_retention_days")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3650:
        raise PlanRejected(f"invalid undo_retention_days {value!r}")
    return value


def undo_tag(task_id: int | None) -> str:
    return f"lakewarden-pre-ttl-{task_id if task_id is not None else 'adhoc'}"


def count_sql(catalog: str, ref: TableRef, plan: dict[str, Any]) -> str:
    """Exact counts right before the delete: (rows it would remove, all rows)."""
    column = sql.column(str(plan.get("column")))
    cut = sql.aware_datetime(plan.get("cutoff"), "cutoff")
    literal = cutoff_literal(str(plan.get("column_type")), cut)
    return (
        f"SELECT count_if({column} < {literal}) AS expired, count(*) AS total "
        f"FROM {target_table(catalog, ref, plan)}"
    )


def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
    statement = delete_sql(catalog, ref, plan, now=datetime.now(UTC))
    max_fraction, undo_days = max_fraction_of(plan), _undo_days(plan)
    name = ref.spark_name(catalog)
    base: dict[str, Any] = {"level": plan["level"], "cutoff": plan["cutoff"]}

    # Every commit since this look is either ours or a writer's: told apart by our tags.
    before = {r["snapshot_id"] for r in _snapshots(spark, catalog, ref)}
    # 1. Count exactly what the delete would remove, now, and hold if it is too much.
    row = spark.sql(count_sql(catalog, ref, plan)).collect()[0]
    counted, total = int(row["expired"]), int(row["total"])
    base.update(counted_rows=counted, rows_before=total, max_fraction=max_fraction)
    hold_if_too_much(counted, total, max_fraction, base)
    if counted == 0:
        return JobResult(
            {**base, "deleted_records": 0, "note": "nothing older than the cutoff"}, None
        )

    # 2. The undo path: tag the snapshot before the delete; clean keeps it until it lapses.
    #    A tag makes no snapshot, so it carries no commit tags; named after the task, a
    #    retried attempt replaces it instead of adding another.
    commits.before_commit()  # the tag is a commit too: not for a task the policy stopped
    snapshots = _snapshots(spark, catalog, ref)
    main = spark.sql(
        f"SELECT snapshot_id FROM {name}.refs WHERE name = '{branch_of(plan)}'"
    ).collect()
    if main:
        pre = int(main[0]["snapshot_id"])
        # A tag's retention counts from its snapshot's commit time: add the snapshot's age,
        # so the undo window is undo_days from now, however old the last commit is.
        made = next(r["committed_at"] for r in snapshots if r["snapshot_id"] == pre)
        age_ms = tag_max_ref_age_ms(undo_days, made.astimezone(UTC), datetime.now(UTC))
        tag = undo_tag(commits.task_id())
        spark.sql(
            f"ALTER TABLE {name} CREATE OR REPLACE TAG `{tag}` "
            f"AS OF VERSION {pre} RETAIN {math.ceil(age_ms / 60_000)} MINUTES"
        ).collect()
        base["undo"] = {
            "tag": tag,
            "snapshot_id": pre,
            "retain_days": undo_days,
            "how": (
                f"{sql.procedure(catalog, 'rollback_to_snapshot')}('{ref.dotted}', {pre})"
                if branch_of(plan) == MAIN_BRANCH
                # rollback_to_snapshot moves main only: a branch is set back by name
                else f"ALTER TABLE {name} REPLACE BRANCH `{branch_of(plan)}` AS OF VERSION {pre}"
            ),
        }

    # 3. Ask the policy once more, then delete, the commit tagged with the task and attempt
    #    (so a retried attempt finds it: commits.find_commit), or outside a scheduled job
    #    with a tag of this run alone.
    commits.before_commit()
    tags = commits.commit_properties() or {RUN_KEY: uuid4().hex}
    commits.with_commit_tags(spark, tags, lambda: spark.sql(statement).collect())

    # Our commit: new since the count and carrying our tags. Never a writer's commit, even
    # one of this Spark application; a DELETE that matched nothing still commits (empty).
    new = [c for c in history.snapshots_table(spark, name) if c.native["snapshot_id"] not in before]
    found = finder.newest(finder.marked(new, tags))
    if found is None:
        # Counted rows were there, the DELETE ran, and no commit carries our tags: a delete
        # nobody can verify (or find again on a retry) must not pass as done.
        undo = base.get("undo", {}).get("how", "roll back to the snapshot before it")
        raise VerificationFailed(
            f"TTL issued its delete of {counted} counted rows but no new commit carries its "
            f"tags {sorted(tags)}: check the table's snapshots; to undo a delete: {undo}"
        )
    snap = found.native
    summary = snap["summary"] or {}

    def n(key: str) -> int:
        return int(summary.get(key, 0) or 0)

    added_deletes = n("added-delete-files")
    # Live rows the commit removed, counted on both sides of it: the summary's record
    # counts are physical, and a whole file dropped (or rewritten) may hold rows a delete
    # file had already removed, which must not count as deleted now.
    deleted = _rows_at(spark, name, snap["parent_id"]) - _rows_at(spark, name, snap["snapshot_id"])
    metrics = {
        **base,
        "operation": snap["operation"],
        "deleted_records": deleted,
        "deleted_data_files": n("deleted-data-files"),
        "added_data_files": n("added-data-files"),
        "rewritten_rows_kept": n("added-records"),
        "added_delete_files": added_deletes,
        "removed_bytes": n("removed-files-size"),
        # whole files dropped, nothing written: what partition level promises
        "metadata_only": n("added-data-files") == 0 and added_deletes == 0,
    }
    # 4. What was deleted must be what was counted, give or take rows writers added or
    #    removed between the count and the delete.
    meanwhile = sum(
        int(c.summary.get(key, 0) or 0)
        for c in new
        if c.id != found.id
        for key in ("added-records", "deleted-records")
    )
    if deleted == 0:
        metrics["note"] = (
            f"the delete matched nothing (counted {counted} right before; writers changed "
            f"{meanwhile} rows meanwhile): its commit is empty"
        )
    if abs(deleted - counted) > meanwhile:
        undo = base.get("undo", {}).get("how", "roll back to the snapshot before it")
        raise VerificationFailed(
            f"TTL deleted {deleted} rows where it counted {counted} right before "
            f"(writers added {meanwhile} meanwhile): check the table; to undo: {undo}"
        )
    return JobResult(metrics, int(snap["snapshot_id"]))


KIND = Kind(name="ttl", plan=plan, run=run, swept=True)
