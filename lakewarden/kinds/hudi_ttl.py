"""TTL on a Hudi table (issue 28), under the table's `ttl` policy section: rows whose
`column` is older than `retention_days` go, planned in Python from the table's rows as
hudi-rs reads them (the column and each row's partition path; no JVM), run by Hudi itself
(`lakewarden.jobs.hudi`).

Partition level (Hudi's `delete_partition`: a replacecommit, no data rewritten) when the
table is partitioned on the TTL column alone and each partition's value is a day lakewarden
reads (`yyyy-MM-dd`, `yyyy/MM/dd` or `yyyyMMdd`, Hive-style `col=` or not): a partition
goes when its whole day is before the retention cutoff and every row in it is (a partition
partly inside retention is kept whole, as Iceberg's boundary rounding does). Row level
(Hudi's `delete` of the rows before the exact cutoff) otherwise, or when the policy says
`level: row`. TTL columns: date, timestamp (with or without zone), or a string holding
`yyyy-MM-dd` days.

The holds are Iceberg's (`kinds.ttl`): never every row, never more than `max_fraction`,
every count exact (the rows themselves). The job savepoints the table before deleting,
keeps that savepoint `undo_retention_days`, and checks what the commit deleted against what
it counted right before; a mismatch restores the savepoint and fails the task loud.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from lakewarden.kinds.base import PlanOutcome, Verdict
from lakewarden.kinds.ttl import cutoff_literal, retention_cutoff
from lakewarden.outcomes import PlanRejected
from lakewarden.policy.model import MAIN_BRANCH, TTLPolicy
from lakewarden.spark import sql

if TYPE_CHECKING:
    import pyarrow as pa

    from lakewarden.formats.hudi.timeline import HudiTimeline

KIND = "ttl"
PARTITION = "_hoodie_partition_path"
# Where a TTL run records what it did, read again by a retry: the savepoint made before
# deleting, and the commit that deleted (by its mark, `formats.hudi.jobs.TTL_MARK`).
SAVEPOINT = "hudi_savepoint"
INSTANT = "hudi_ttl_instant"
DAY_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%Y%m%d")
ISO_DAY = r"^\d{4}-\d{2}-\d{2}$"


def column_type_of(arrow_type: pa.DataType) -> str | None:
    """The TTL column type lakewarden supports for this Arrow type, or None."""
    import pyarrow as pa

    if pa.types.is_date(arrow_type):
        return "date"
    if pa.types.is_timestamp(arrow_type):
        return "timestamptz" if arrow_type.tz else "timestamp"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    return None


def partition_day(path: str, column: str) -> date | None:
    """The day a partition path names for `column` (`dt=2026-11-20`, `2026/11/20`, ...), or
    None when lakewarden does not read it as a day."""
    value = path.removeprefix(f"{column}=")
    for fmt in DAY_FORMATS:
        try:
            return datetime.strptime(value, fmt).date()
        except ValueError:
            continue
    return None


def partition_fields(timeline: HudiTimeline) -> list[str]:
    """The table's partition fields (hoodie.properties; a custom key generator's `:type`
    suffix dropped)."""
    raw = timeline.properties.get("hoodie.table.partition.fields", "")
    return [f.split(":", 1)[0] for f in raw.split(",") if f]


def expired_mask(values: pa.ChunkedArray, column_type: str, cut: datetime) -> pa.ChunkedArray:
    """True where a value is before `cut` (nulls never expire)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column_type == "date":
        bound: Any = pa.scalar(cut.date(), pa.date32())
    elif column_type == "string":
        bound = cut.date().isoformat()  # yyyy-MM-dd compares as its day
    else:
        naive = cut.astimezone(UTC).replace(tzinfo=None)
        bound = pa.scalar(naive if column_type == "timestamp" else cut, values.type)
    return pc.fill_null(pc.less(values, bound), False)


def plan_rows(
    policy: TTLPolicy,
    rows: pa.Table,
    fields: list[str],
    now: datetime,
    table: dict[str, Any],
) -> PlanOutcome:
    """TTL planning over the table's rows (`PARTITION` and the column; pure: unit-tested
    with an Arrow table). `fields`: the table's partition fields; `table`: what the plan
    carries about the table (base path, head, metadata table)."""
    import pyarrow.compute as pc

    if not policy.column or policy.retention_days is None:
        return PlanOutcome(None, "TTL needs column and retention_days")
    col = policy.column
    if policy.branch != MAIN_BRANCH:
        return PlanOutcome(
            None, f"a Hudi table has no branches: TTL cannot run on {policy.branch!r}"
        )
    if col not in rows.column_names:
        return PlanOutcome(None, f"the table has no column {col!r}: TTL cannot run")
    column_type = column_type_of(rows.schema.field(col).type)
    if column_type is None:
        return PlanOutcome(
            None,
            f"column {col!r} is {rows.schema.field(col).type}, not a date, timestamp or "
            "yyyy-MM-dd string: TTL cannot use it",
        )
    if rows.num_rows == 0:
        return PlanOutcome(None, "table has no data: nothing to expire")
    values = rows.column(col)
    if (
        column_type == "string"
        and not pc.all(pc.fill_null(pc.match_substring_regex(values, ISO_DAY), True)).as_py()
    ):
        return PlanOutcome(None, f"column {col!r} holds strings that are not yyyy-MM-dd days")
    retention = retention_cutoff(
        now, policy.retention_days, "date" if column_type == "string" else column_type
    )
    expired = expired_mask(values, column_type, retention)
    total = rows.num_rows
    parts = rows.column(PARTITION).to_pylist()
    flags = expired.to_pylist()
    by_part: dict[str, list[int]] = {}  # partition -> [rows, expired rows]
    for part, old in zip(parts, flags, strict=True):
        counts = by_part.setdefault(part, [0, 0])
        counts[0] += 1
        counts[1] += int(bool(old))
    days = {p: partition_day(p, col) for p in by_part}
    aligned = fields == [col] and all(d is not None for d in days.values())
    if policy.level == "partition" and not aligned:
        return PlanOutcome(
            None,
            f"level=partition needs the table partitioned on {col!r} alone with day values "
            f"(yyyy-MM-dd, yyyy/MM/dd or yyyyMMdd; it is partitioned on {fields or 'nothing'}): "
            "partition by it or use level=row",
        )
    level = "partition" if aligned and policy.level != "row" else "row"
    newest = pc.max(values).as_py()
    detail_where = (
        f"retention cutoff {retention.isoformat()} ({level} level; "
        f"retention {policy.retention_days:g} days)"
    )
    if not pc.any(pc.invert(expired)).as_py() and pc.all(pc.is_valid(values)).as_py():
        return PlanOutcome(
            None,
            f"held: every row is older than the retention (newest {newest} < {detail_where}): "
            "running would remove every row; a TTL never empties a table on its own (has "
            "the writer stopped?)",
        )
    drop: list[str] = []
    kept_partly: list[str] = []
    if level == "partition":
        for part, (n, old) in sorted(by_part.items()):
            day = days[part]
            assert day is not None
            whole_day_before = (
                datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1) <= retention
            )
            if whole_day_before and old == n:
                drop.append(part)
            elif old:
                kept_partly.append(part)
        to_delete = sum(by_part[p][0] for p in drop)
    else:
        to_delete = sum(old for _, old in by_part.values())
    fraction = to_delete / total
    detail = (
        f"{detail_where}; {to_delete} of {total} rows ({fraction:.1%}, exact)"
        + (f", {len(drop)} partition(s) dropped whole" if level == "partition" else "")
        + (
            f", {len(kept_partly)} partition(s) partly inside retention kept whole"
            if kept_partly
            else ""
        )
    )
    if to_delete >= total:
        return PlanOutcome(
            None,
            f"held: every row would go ({detail}): a TTL never empties a table on its own",
        )
    if fraction > policy.max_fraction:
        return PlanOutcome(
            None,
            f"held: would remove {fraction:.1%} > max_fraction "
            f"{policy.max_fraction:.0%} ({detail})",
        )
    if to_delete == 0:
        return PlanOutcome(None, f"nothing older than the cutoff: {detail}")
    plan = {
        **table,
        "format": "hudi",
        "action": "delete",
        "column": col,
        "column_type": column_type,
        "cutoff": retention.isoformat(),
        "retention_days": policy.retention_days,
        "level": level,
        "partitions": drop,
        "rows_to_delete": to_delete,
        "rows_before": total,
        "estimated_fraction": round(fraction, 4),
        "max_fraction": policy.max_fraction,
        "undo_retention_days": policy.undo_retention_days,
    }
    how = "Hudi's delete_partition" if level == "partition" else "Hudi's delete of the rows"
    return PlanOutcome(plan, f"expire rows: {detail}; {how}")


def read_rows(base_path: str, column: str, timeline: HudiTimeline | None = None) -> pa.Table:
    """The table's latest rows as hudi-rs reads them, those two columns only: each row's
    partition path and the TTL column (when the table has it). `timeline`: the table's, whose
    catalog's object-store credentials hudi-rs reads with (`HudiTimeline.table`)."""
    import pyarrow as pa
    from hudi import HudiReadOptions  # the `hudi` extra

    from lakewarden.formats.hudi.timeline import HudiTimeline

    table = (timeline or HudiTimeline(base_path)).table()
    names = [PARTITION, *(c for c in [column] if c in table.get_schema().names)]
    batches = table.read(HudiReadOptions().with_projection(names))
    if not batches:
        return pa.table({PARTITION: pa.array([], pa.string())})
    return pa.Table.from_batches(batches).select(names)


def plan(policy: TTLPolicy, timeline: HudiTimeline, now: datetime) -> PlanOutcome:
    """The TTL's plan for the table now, or why not (reads its rows with hudi-rs)."""
    if not policy.column or policy.retention_days is None:
        return PlanOutcome(None, "TTL needs column and retention_days")
    completed = timeline.completed()
    if not completed:
        return PlanOutcome(None, "table has no data: nothing to expire")
    table = {
        "base_path": timeline.base_path,
        "head": completed[-1].requested,
        "metadata_table": bool(timeline.properties.get("hoodie.table.metadata.partitions")),
    }
    rows = read_rows(timeline.base_path, policy.column, timeline)
    return plan_rows(policy, rows, partition_fields(timeline), now, table)


def verdict(policy: TTLPolicy, timeline: HudiTimeline, now: datetime) -> Verdict:
    if not policy.enabled:
        return Verdict(False, "ttl is disabled by policy")
    outcome = plan(policy, timeline, now)
    metrics = {
        k: outcome.plan[k]
        for k in ("level", "rows_to_delete", "rows_before", "partitions")
        if outcome.plan
    }
    return Verdict(outcome.plan is not None, outcome.reason, metrics)


def checked_plan(plan: dict[str, Any], now: datetime) -> tuple[str, str, int, float, int]:
    """(level, the delete's Spark predicate, rows planned, max_fraction, undo days) of a
    TTL plan, checked again as the job starts: a cutoff inside the retention (a tampered
    or mistaken plan) is refused. The predicate is built from typed values, never plan
    text."""
    level = plan.get("level")
    column_type = plan.get("column_type")
    if plan.get("action") != "delete" or level not in ("partition", "row"):
        raise PlanRejected(f"not a TTL plan: {plan.get('action')}/{level}")
    if column_type not in ("date", "timestamp", "timestamptz", "string"):
        raise PlanRejected(f"unsupported TTL column type {column_type!r}")
    cut = sql.aware_datetime(plan.get("cutoff"), "cutoff")
    days = plan.get("retention_days")
    if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days < 1e6:
        raise PlanRejected(f"invalid retention_days {days!r}")
    if cut > now - timedelta(days=days):
        raise PlanRejected(
            f"cutoff {cut.isoformat()} is inside the retention of {days:g} days "
            f"(now {now.isoformat()}): refusing to remove rows inside retention"
        )
    if level == "partition" and not plan.get("partitions"):
        raise PlanRejected("a partition-level TTL plan without partitions")
    planned = plan.get("rows_to_delete")
    if isinstance(planned, bool) or not isinstance(planned, int) or planned < 1:
        raise PlanRejected(f"invalid rows_to_delete {planned!r}")
    fraction = plan.get("max_fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        raise PlanRejected(f"invalid max_fraction {fraction!r}")
    undo = plan.get("undo_retention_days")
    if isinstance(undo, bool) or not isinstance(undo, int) or not 1 <= undo <= 3650:
        raise PlanRejected(f"invalid undo_retention_days {undo!r}")
    column = sql.column(str(plan.get("column")))
    if column_type == "string":  # a yyyy-MM-dd string compares as its day's text
        literal = f"'{cut.astimezone(UTC).date().isoformat()}'"
    else:
        literal = cutoff_literal(str(column_type), cut)
    return str(level), f"{column} < {literal}", planned, float(fraction), undo


def same_rows(counted: int, deleted: int | None) -> bool:
    """The exact-count guard: the commit deleted what was counted right before it."""
    return deleted is not None and deleted == counted


def undo_expired(
    savepoints: list[tuple[str, datetime]], undo_days: int, now: datetime
) -> list[str]:
    """The pre-TTL savepoints whose undo window (`undo_days` from the run that made them)
    has passed: lakewarden drops them, the cleaner may then reclaim what they held."""
    return [s for s, made in savepoints if made + timedelta(days=undo_days) <= now]


def marked(timeline: HudiTimeline, mark: str) -> str | None:
    """The completed write commit whose extraMetadata carries the TTL `mark`, if any."""
    from lakewarden.formats.hudi.jobs import TTL_MARK
    from lakewarden.formats.hudi.timeline import WRITE_ACTIONS

    for instant in reversed(timeline.completed()):
        if instant.action in WRITE_ACTIONS:
            extra = timeline.read_instant(instant).get("extraMetadata") or {}
            if extra.get(TTL_MARK) == mark:
                return instant.requested
    return None


def deleted_by_commit(timeline: HudiTimeline, instant: str, savepoint: str) -> int:
    """The rows the TTL commit `instant` deleted, from its commit metadata: a delete's
    write stats count them (`numDeletes`); a delete_partition's names the file groups it
    replaced, whose rows are counted as of the savepoint made before it (hudi-rs)."""
    import pyarrow.compute as pc
    from hudi import HudiReadOptions

    done = [i for i in timeline.completed() if i.requested == instant]
    if not done:
        raise LookupError(f"commit {instant} is not on the timeline of {timeline.base_path}")
    meta = timeline.read_instant(done[-1])
    replaced = meta.get("partitionToReplaceFileIds") or {}
    if not replaced:
        stats = meta.get("partitionToWriteStats") or {}
        return sum(int(s.get("numDeletes") or 0) for ss in stats.values() for s in ss)
    groups = {f for ids in replaced.values() for f in ids}
    options = HudiReadOptions().with_as_of_timestamp(savepoint)
    options = options.with_projection(["_hoodie_file_name"])
    rows = 0
    for batch in timeline.table().read(options):
        names = batch.column("_hoodie_file_name")
        ids = pc.utf8_slice_codeunits(names, 0, max((len(g) for g in groups), default=0))
        rows += pc.sum(pc.is_in(ids, value_set=strings(groups))).as_py() or 0
    return int(rows)


def strings(values: set[str]) -> pa.Array:
    import pyarrow as pa

    return pa.array(sorted(values), pa.string())


def pre_ttl_savepoints(timeline: HudiTimeline) -> list[tuple[str, datetime]]:
    """lakewarden's pre-TTL savepoints on the timeline, with when each was made."""
    from lakewarden.formats.hudi.jobs import PRE_TTL

    out = []
    for instant in timeline.completed():
        if instant.action != "savepoint":
            continue
        meta = timeline.read_instant(instant)
        if meta.get("comments") == PRE_TTL and meta.get("savepointedAt"):
            made = datetime.fromtimestamp(int(meta["savepointedAt"]) / 1000, UTC)
            out.append((instant.requested, made))
    return out
