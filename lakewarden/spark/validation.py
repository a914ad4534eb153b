"""Rewrite validation: a rewrite must not change a table's rows, and readers never see one
that did.

`rewrite_data_files` (lakewarden.spark.actions: compaction, clustering and Z-order all go
through it, on main or on `compaction.branch`) commits to a staging branch when the job's
rewrite is validated (`will_validate`; lakewarden.spark.staging), then calls
`validate_rewrite`. It finds the job's commits on the staging branch (those carrying its
task id and attempt: lakewarden.spark.commits) since the base, the target's head when the
rewrite started, grouped into spans of consecutive commits, and compares, for every
partition a span's commits touched, the row count and an order-independent checksum (the
sum of `xxhash64` over the chosen columns) read through Spark's Iceberg reader, which
applies delete files, at the snapshot before the span and at its last commit.

A mismatch raises RewriteMismatch: the rewrite is never published to its target (the
caller drops the staging branch), so no reader of the target ever saw it. A match is
published (`staging.publish`).
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
from lakewarden.spark import staging
from lakewarden.spark.commits import commit_properties
from lakewarden.spark.staging import Stage

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


def will_validate() -> bool:
    """Whether the running job's rewrites are validated (so staged first): inside a
    scheduled job (`validating`, commit properties set) with validation on."""
    active = _ACTIVE.get()
    return active is not None and bool(commit_properties()) and active.policy.enabled


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
    stage: Stage | None,
    target: str = MAIN_BRANCH,
) -> dict[str, Any] | None:
    """What `metrics["validation"]` records of the rewrite that just ran on the Java
    `table` (started at snapshot `start_id` of `target`), committed to `stage` (None: it
    was not staged, as when validation is off); None outside a scheduled job. Raises
    RewriteMismatch when a partition's rows changed: the caller must then drop the staging
    branch, never publishing it."""
    active = _ACTIVE.get()
    if active is None or not commit_properties():
        return None
    branch = stage.name if stage is not None else target
    if active.failpoint in (CORRUPT, CORRUPT_THEN_WRITE) and metrics.get("rewritten_data_files"):
        write = active.failpoint == CORRUPT_THEN_WRITE
        _corrupt(spark, ref.spark_name(catalog), table, branch, target, write=write)
    policy = active.policy
    if not policy.enabled or stage is None:
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
    result["publish"] = staging.refused(stage)
    bad = [p for p in result["partitions"] if not p["match"]]
    raise RewriteMismatch(
        f"post-rewrite validation failed: {len(bad)} of {result['partitions_checked']} "
        f"partition(s) changed ({_describe(bad[0])}); {result['publish']['reason']}",
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
    started = time.monotonic()
    touched = [touched_partitions(jvm, catalog, table, span.commits) for span in spans]
    estimate = sum(
        rows_in(jvm, table, span.before, parts, policy.max_rows)
        for span, parts in zip(spans, touched, strict=True)
    )
    # metadata (which partitions, how many rows) against the scans of both sides
    seconds = {"metadata": round(time.monotonic() - started, 3)}
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
    started = time.monotonic()
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
    seconds["scan"] = round(time.monotonic() - started, 3)
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
        "seconds": seconds,
        "reason": (
            "a partition's rows changed"
            if failed
            else "every touched partition holds the same rows"
        ),
    }


# --- the test-only failpoint ------------------------------------------------------------


def _corrupt(
    spark: SparkSession, name: str, table: Any, branch: str, target: str, *, write: bool
) -> None:
    """Drop one data file of the rewrite's output on `branch` (where it committed: its
    staging branch) in a commit carrying the task's tags, as if the rewrite had lost its
    rows; with `write`, then a writer appends a copy of one row to `target` (no tags).
    Reached only with settings.failpoints_enabled."""
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
        into = name if target == MAIN_BRANCH else f"{name}.`branch_{target}`"
        spark.sql(f"INSERT INTO {into} SELECT * FROM {into} LIMIT 1").collect()
    table.refresh()
