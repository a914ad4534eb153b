"""Post-rewrite validation: a rewrite must not change a table's rows.

`rewrite_data_files` (lakewarden.spark.actions: compaction, clustering and Z-order all go
through it) calls `validate_rewrite` once Iceberg's action returned, and so does the
compaction of a named branch (lakewarden.spark.branches) once it committed; all below is
on that branch (main, or `compaction.branch`). It finds the job's commits (those carrying
its task id and attempt: lakewarden.spark.commits) since the snapshot that was the head
when the rewrite started, grouped into spans of consecutive commits (with partial progress
a writer may commit between two of them), and compares, for every partition a span's
commits touched, the row count and an order-independent checksum (the sum of `xxhash64`
over the chosen columns) read through Spark's Iceberg reader, which applies delete files,
at the snapshot before the span and at its last commit.

On a mismatch the rewrite is undone before the task fails (`undo`):

- no other commit since the job's first one: the branch is set back to the snapshot
  before it, in one compare-and-swap of the table's metadata (a writer committing
  meanwhile makes it fail, and the revert below is done instead);
- a writer committed since: a new commit (an overwrite) swaps the job's output files back
  for the files it replaced, keeping the writer's rows; it fails if a writer removed one of
  them, or added deletes against them, meanwhile. Only when the table has no delete files:
  restored files get a new data sequence number, and deletes that applied to them would
  stop applying. Otherwise the table is left as it is and the reason says how to undo it
  by hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.iceberg import finder, history
from lakewarden.formats.iceberg.partitions import predicate as _predicate
from lakewarden.formats.iceberg.partitions import quote_column as _quote
from lakewarden.metadata import jsonable
from lakewarden.outcomes import RewriteMismatch
from lakewarden.policy.model import MAIN_BRANCH, ValidationPolicy
from lakewarden.spark.commits import REVERT_KEY, TASK_KEY, commit_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

REWRITE_KINDS = ("compaction", "clustering", "zorder")
# More touched partitions than this are checked as one total (the query names each one).
MAX_PARTITIONS = 200
# Of the partitions checked, at most this many are listed in the metrics (mismatches first).
MAX_LISTED = 50

CORRUPT = "corrupt-rewrite"
CORRUPT_THEN_WRITE = "corrupt-rewrite-then-write"


@dataclass(frozen=True)
class Validating:
    policy: ValidationPolicy
    # Test-only (settings.failpoint, honoured with settings.failpoints_enabled only).
    failpoint: str | None = None


_ACTIVE: ContextVar[Validating | None] = ContextVar("lakewarden_validation", default=None)


@contextmanager
def validating(policy: ValidationPolicy, failpoint: str | None = None) -> Iterator[None]:
    """The scheduler runs a job inside this: its rewrites are validated under `policy`."""
    token = _ACTIVE.set(Validating(policy, failpoint))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@dataclass
class Span:
    """Consecutive commits of the job: `before` is the parent of the first."""

    before: int
    commits: list[Any] = field(default_factory=list)  # Java Snapshots, oldest first

    @property
    def after(self) -> int:
        return int(self.commits[-1].snapshotId())


def validate_rewrite(
    spark: SparkSession,
    catalog: str,
    ref: TableRef,
    table: Any,
    start_id: int | None,
    metrics: dict[str, Any],
    branch: str = MAIN_BRANCH,
) -> dict[str, Any] | None:
    """What `metrics["validation"]` records of the rewrite that just ran on the Java
    `table` (started at snapshot `start_id` of `branch`); None outside a scheduled job.
    Raises RewriteMismatch, after undoing the rewrite, when a partition's rows changed."""
    active = _ACTIVE.get()
    if active is None or not commit_properties():
        return None
    if active.failpoint in (CORRUPT, CORRUPT_THEN_WRITE) and metrics.get("rewritten_data_files"):
        write = active.failpoint == CORRUPT_THEN_WRITE
        _corrupt(spark, ref.spark_name(catalog), table, branch, write=write)
    policy = active.policy
    if not policy.enabled:
        return _skipped("validation is off for this table (validation.enabled: false)")
    table.refresh()
    spans = job_spans(table, start_id, branch)
    if not spans:
        return _skipped("the rewrite committed nothing")
    started = time.monotonic()
    try:
        result = _compare(spark, catalog, ref, table, spans, policy)
    except Exception as exc:  # the rewrite stands; that it was not checked is said
        log.warning("validation of %s could not run", ref.dotted, exc_info=True)
        result = _skipped(f"validation could not run: {type(exc).__name__}: {str(exc)[:300]}")
    result["cost_seconds"] = round(time.monotonic() - started, 3)
    if result["status"] != "failed":
        return result
    try:
        result["undo"] = undo(spark, table, spans, branch)
    except Exception as exc:  # the task must still fail for good, saying the undo failed
        log.exception("undoing the rewrite of %s failed", ref.dotted)
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        result["undo"] = {
            "action": "none",
            "reason": f"undoing it failed ({first}): roll back by hand to snapshot "
            f"{spans[0].before}, the one before the rewrite, re-applying later commits",
        }
    bad = [p for p in result["partitions"] if not p["match"]]
    raise RewriteMismatch(
        f"post-rewrite validation failed: {len(bad)} of {result['partitions_checked']} "
        f"partition(s) changed ({_describe(bad[0])}); {result['undo']['reason']}",
        {**metrics, "validation": result},
    )


def recovered(kind: str, attempt: str | None) -> dict[str, Any]:
    """What a run that recovers an earlier attempt's commit records of its validation (a
    rewrite's), so a success nobody saw validated does not read as a validated one."""
    if kind not in REWRITE_KINDS:
        return {}
    return {
        "validation": _skipped(
            f"recovered the commit of attempt {attempt}: that attempt ended before recording "
            "its outcome, so whether its validation ran is not known"
        )
    }


def _skipped(reason: str) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason}


def _describe(p: dict[str, Any]) -> str:
    return f"{p['partition']}: {p['rows_before']} rows before, {p['rows_after']} after" + (
        "" if p["rows_before"] != p["rows_after"] else ", checksums differ"
    )


# --- the job's commits ------------------------------------------------------------------


def job_spans(table: Any, start_id: int | None, branch: str = MAIN_BRANCH) -> list[Span]:
    """The job's commits in the branch's history since `start_id`, oldest first, in spans
    of consecutive commits (a writer's commit between two of them starts a new span)."""
    walked = history.java_history(table, branch, stop_at=start_id)
    return [
        Span(before=int(s.before), commits=[c.native for c in s.commits])
        for s in finder.spans(walked, commit_properties())
    ]


def _each(java_iterable: Any) -> Iterator[Any]:
    it = java_iterable.iterator()
    while it.hasNext():
        yield it.next()


# --- which partitions, and how to read them ---------------------------------------------


def _python(value: Any) -> Any:
    """A partition value from py4j: Java strings (or Avro's Utf8) as str."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value.toString()) if hasattr(value, "toString") else value


@dataclass(frozen=True)
class Touched:
    """A partition the job's commits added or removed data files in."""

    label: dict[str, Any]  # {partition field: value}
    predicate: str  # SQL selecting its rows; TRUE when it cannot be written as one
    java_filter: Any  # the same partition as an Iceberg expression (to count its rows)


def touched_partitions(jvm: Any, catalog: str, table: Any, commits: list[Any]) -> list[Touched]:
    """The partitions `commits` added or removed data files in, each once (a file costs
    three py4j calls; only a partition not seen yet is described)."""
    io, specs = table.io(), table.specs()
    out: dict[tuple[int, str], Touched] = {}
    for commit in commits:
        for files in (commit.addedDataFiles(io), commit.removedDataFiles(io)):
            for f in _each(files):
                spec_id, part = int(f.specId()), f.partition()
                key = (spec_id, str(part.toString()))
                if key not in out:
                    out[key] = _describe_partition(jvm, catalog, table, specs.get(spec_id), part)
    return list(out.values())


def _describe_partition(jvm: Any, catalog: str, table: Any, spec: Any, part: Any) -> Touched:
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    label: dict[str, Any] = {}
    terms: list[str] = []
    java_filter = expressions.alwaysTrue()
    for i, pf in enumerate(_each(spec.fields())):
        raw = part.get(i)
        value = _python(raw)
        label[str(pf.name())] = jsonable(value)
        transform = str(pf.transform())
        if transform == "void":
            continue
        column = table.schema().findColumnName(pf.sourceId())
        source_type = str(table.schema().findType(pf.sourceId()))
        terms.append(_predicate(catalog, transform, column, value, source_type))
        if column is not None:
            term = expressions.transform(column, pf.transform())
            java_filter = getattr(expressions, "and")(  # a Python keyword
                java_filter,
                expressions.isNull(term) if raw is None else expressions.equal(term, raw),
            )
    return Touched(label, " AND ".join(terms) or "TRUE", java_filter)


def chosen_columns(spark: SparkSession, name: str, policy: ValidationPolicy) -> list[str]:
    """The policy's columns, or every top-level column of a primitive type."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    fields = {f.name: f.dataType for f in spark.table(name).schema.fields}
    if policy.columns:
        missing = [c for c in policy.columns if c not in fields]
        if missing:
            raise ValueError(f"validation.columns names columns the table lacks: {missing}")
        return list(policy.columns)
    return [n for n, t in fields.items() if not isinstance(t, StructType | ArrayType | MapType)]


def rows_in(jvm: Any, table: Any, snapshot_id: int, touched: list[Touched], cap: int) -> int:
    """The rows the touched partitions held at `snapshot_id`, at most: the whole snapshot's
    when that is within `cap` (nothing to plan), else from the data files' record counts (a
    scan planned with the partitions' filter: metadata only, nothing read)."""
    snapshot = table.snapshot(snapshot_id)
    total = snapshot.summary().get("total-records") if snapshot is not None else None
    if total is not None and int(total) <= cap:
        return int(total)
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    where = expressions.alwaysFalse()
    for t in touched:
        where = getattr(expressions, "or")(where, t.java_filter)  # a Python keyword
    tasks = table.newScan().useSnapshot(snapshot_id).filter(where).planFiles()
    try:
        return sum(int(task.file().recordCount()) for task in _each(tasks))
    finally:
        tasks.close()


def _aggregate(
    spark: SparkSession, name: str, span: Span, predicates: list[str], columns: list[str]
) -> dict[tuple[int, int], tuple[int, str]]:
    """{(side, partition index): (rows, checksum)}, side 0 at the snapshot before `span`
    and 1 at its last commit: one Spark job, each side's scan pruned to the partitions'
    rows (index 0 for all of them when `predicates` is one, TRUE). The checksum is a sum
    over rows, so their order does not matter; a DECIMAL(38,0) cannot overflow."""
    if predicates == ["TRUE"]:
        key, where = "0", ""
    else:
        key = "CASE " + " ".join(f"WHEN {p} THEN {i}" for i, p in enumerate(predicates)) + " END"
        where = " WHERE " + " OR ".join(f"({p})" for p in predicates)
    # Each value with its NULL flag: xxhash64 skips NULLs, so without the flags a value
    # moved into a NULL neighbour's column ((NULL, 5) -> (5, NULL)) would hash the same.
    hashed = ", ".join(f"{_quote(c)}, isnull({_quote(c)})" for c in columns)
    sides = " UNION ALL ".join(
        f"SELECT {side} AS side, {key} AS k, count(*) AS n, "
        f"sum(CAST(xxhash64({hashed}) AS DECIMAL(38,0))) AS h "
        f"FROM {name} VERSION AS OF {int(snapshot_id)}{where} GROUP BY 1, 2"
        for side, snapshot_id in ((0, span.before), (1, span.after))
    )
    return {
        (int(r["side"]), int(r["k"])): (int(r["n"]), str(r["h"] or 0))
        for r in spark.sql(sides).collect()
        if r["k"] is not None
    }


def _compare(
    spark: SparkSession,
    catalog: str,
    ref: TableRef,
    table: Any,
    spans: list[Span],
    policy: ValidationPolicy,
) -> dict[str, Any]:
    name = ref.spark_name(catalog)
    columns = chosen_columns(spark, name, policy)
    if not columns:
        return _skipped("the table has no column of a primitive type to checksum")
    jvm: Any = spark._jvm
    touched = [touched_partitions(jvm, catalog, table, span.commits) for span in spans]
    estimate = sum(
        rows_in(jvm, table, span.before, parts, policy.max_rows)
        for span, parts in zip(spans, touched, strict=True)
    )
    if estimate > policy.max_rows:
        return {
            **_skipped(
                f"the partitions the rewrite touched held {estimate} rows before it > "
                f"validation.max_rows {policy.max_rows}: not read twice to check them"
            ),
            "rows_estimate": estimate,
            "max_rows": policy.max_rows,
        }
    partitions: list[dict[str, Any]] = []
    for span, parts in zip(spans, touched, strict=True):
        labels: list[Any] = [p.label for p in parts]
        predicates = [p.predicate for p in parts]
        if not predicates or len(predicates) > MAX_PARTITIONS or "TRUE" in predicates:
            labels, predicates = [f"the whole table ({len(parts)} partition(s) touched)"], ["TRUE"]
        counted = _aggregate(spark, name, span, predicates, columns)
        for i, label in enumerate(labels):
            (n0, h0), (n1, h1) = counted.get((0, i), (0, "0")), counted.get((1, i), (0, "0"))
            partitions.append(
                {
                    "partition": label,
                    "rows_before": n0,
                    "rows_after": n1,
                    "match": n0 == n1 and h0 == h1,
                    "before_snapshot": span.before,
                    "after_snapshot": span.after,
                }
            )
    failed = any(not p["match"] for p in partitions)
    partitions.sort(key=lambda p: p["match"])
    return {
        "status": "failed" if failed else "passed",
        "columns": columns,
        "rows": sum(p["rows_before"] for p in partitions),
        "rows_estimate": estimate,
        "partitions_checked": len(partitions),
        "partitions": partitions[:MAX_LISTED],
        "spans": [
            {"before_snapshot": s.before, "after_snapshot": s.after, "commits": len(s.commits)}
            for s in spans
        ],
        "max_rows": policy.max_rows,
        "reason": (
            "a partition's rows changed"
            if failed
            else "every touched partition holds the same rows"
        ),
    }


# --- undoing a rewrite ------------------------------------------------------------------


def undo(
    spark: SparkSession, table: Any, spans: list[Span], branch: str = MAIN_BRANCH
) -> dict[str, Any]:
    """Undo the job's commits on `branch` (see the module's docstring); says what it did
    and why."""
    jvm: Any = spark._jvm
    table.refresh()
    first_before, last = spans[0].before, spans[-1].after
    ops = table.operations()
    base = ops.current()
    head = base.ref(branch)
    if len(spans) == 1 and head is not None and int(head.snapshotId()) == last:
        meta = jvm.org.apache.iceberg.TableMetadata.buildFrom(base).setBranchSnapshot(
            first_before, branch
        )
        try:
            ops.commit(base, meta.build())
            table.refresh()
            return {
                "action": "rolled_back",
                "to_snapshot": first_before,
                "reason": f"no writer committed since the rewrite: {_which(branch)} was rolled "
                f"back to snapshot {first_before}, the one before it",
            }
        except Exception as exc:  # a writer's commit won the race: revert instead
            log.warning("rollback of %s lost to a commit: %s", table.name(), exc)
            table.refresh()
    return _revert(table, spans, branch)


def _which(branch: str) -> str:
    return "the table" if branch == MAIN_BRANCH else f"branch {branch}"


def _revert(table: Any, spans: list[Span], branch: str) -> dict[str, Any]:
    ours = [c for span in spans for c in span.commits]
    ids = [int(c.snapshotId()) for c in ours]
    current = table.snapshot(branch)
    by_hand = (
        f"to undo by hand, restore the data files the rewrite snapshots {ids} removed "
        f"(or roll back to snapshot {spans[0].before} and re-apply the later commits)"
    )
    deletes = int(current.summary().get("total-delete-files", "0") or 0)
    removed_deletes = sum(int(c.summary().get("removed-delete-files", "0") or 0) for c in ours)
    if deletes or removed_deletes:
        return {
            "action": "none",
            "reason": "a writer committed since the rewrite and the table has delete files: "
            f"not undone automatically (restored files would escape their deletes); {by_hand}",
        }
    io = table.io()
    added: dict[str, Any] = {}
    removed: dict[str, Any] = {}
    for c in ours:
        for f in _each(c.removedDataFiles(io)):
            path = str(f.location())
            if added.pop(path, None) is None:
                removed[path] = f
        for f in _each(c.addedDataFiles(io)):
            added[str(f.location())] = f
    # An overwrite, not a RewriteFiles: Iceberg refuses a "replace" whose added and removed
    # row counts differ, which is what a rewrite that lost rows leaves to undo. It fails if
    # a writer removed one of the files, or added deletes against them, meanwhile.
    revert = (
        table.newOverwrite()
        .toBranch(branch)
        .validateFromSnapshot(current.snapshotId())
        .validateNoConflictingDeletes()
    )
    for f in added.values():
        revert = revert.deleteFile(f)
    for f in removed.values():
        revert = revert.addFile(f)
    revert = revert.set(REVERT_KEY, commit_properties().get(TASK_KEY, ""))
    try:
        revert.commit()
    except Exception as exc:
        return {
            "action": "none",
            "reason": f"a writer committed since the rewrite and reverting it failed "
            f"({str(exc).splitlines()[0][:300]}): {by_hand}",
        }
    table.refresh()
    snapshot_id = int(table.snapshot(branch).snapshotId())
    return {
        "action": "reverted",
        "snapshot_id": snapshot_id,
        "reverted_commits": ids,
        "reason": f"a writer committed since the rewrite: only the rewrite was reverted "
        f"(commit {snapshot_id} puts back the {len(removed)} data files it replaced, "
        f"the writers' commits are kept)",
    }


# --- the test-only failpoint ------------------------------------------------------------


def _corrupt(spark: SparkSession, name: str, table: Any, branch: str, *, write: bool) -> None:
    """Drop one data file of the rewrite's output in a commit carrying the task's tags, as
    if the rewrite had lost its rows; with `write`, then a writer appends a copy of one
    remaining row (no tags). Reached only with settings.failpoints_enabled."""
    table.refresh()
    snapshot = table.snapshot(branch)
    added = next(_each(snapshot.addedDataFiles(table.io())), None)
    if added is None:
        return
    log.warning("failpoint: dropping %s from %s", added.location(), table.name())
    delete = table.newDelete().toBranch(branch).deleteFile(added)
    for key, value in commit_properties().items():
        delete = delete.set(key, value)
    delete.commit()
    if write:
        target = name if branch == MAIN_BRANCH else f"{name}.`branch_{branch}`"
        spark.sql(f"INSERT INTO {target} SELECT * FROM {target} LIMIT 1").collect()
    table.refresh()
