"""Clustering (sort by columns) and Z-order: rewrite the partitions where a lookup on the
policy's columns opens many files, as measured from file bounds alone
(`lakewarden.health.files_per_lookup.files_per_lookup`).

The plan carries Iceberg's own `rewrite_data_files` arguments as text: a `sort_order`
(`` `a` ASC NULLS LAST, … `` or `` zorder(`a`, `b`) ``) and, when only some partitions are
poor and they can be named by identity partition values, a `where` predicate. A stored plan
is JSON that anything with database access could have edited, so the runner never trusts
it: `layout_sql` parses both strings back against a strict grammar (the only shapes the
planner produces) and rejects anything else.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    IcebergType,
)

from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.iceberg import history
from lakewarden.formats.iceberg.partitions import sql_literal
from lakewarden.formats.iceberg.sort_order import DeclaredOrder, declared_order
from lakewarden.health.files_per_lookup import files_per_lookup
from lakewarden.kinds.base import (
    EventFacts,
    JobResult,
    Kind,
    Planner,
    PlanOutcome,
    PlanRejected,
    Runner,
    Verdict,
)
from lakewarden.metadata import DataFile, Partition, jsonable, read_files
from lakewarden.policy.model import ClusteringPolicy, ZOrderPolicy
from lakewarden.spark import sql
from lakewarden.spark.actions import COMMITTED, rewrite_data_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LayoutPolicy = ClusteringPolicy | ZOrderPolicy

OPTIONS = frozenset(
    {
        "rewrite-all",
        "target-file-size-bytes",
        "partial-progress.enabled",
        "partial-progress.max-commits",
        "max-concurrent-file-group-rewrites",
    }
)

# A partition filter naming more partitions than this is not worth its text: rewrite the table.
MAX_WHERE_PARTITIONS = 500
MAX_WHERE_CHARS = 64 * 1024


# The only shapes the planner writes, checked again before anything runs.
_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_LITERAL = (
    r"(?:-?\d{1,19}"
    r"|-?\d+(?:\.\d+)?(?:E[+-]?\d+)?D"
    r"|TRUE|FALSE"
    r"|DATE '\d{4}-\d{2}-\d{2}'"
    r"|TIMESTAMP '\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}Z'"
    r"|TIMESTAMP_NTZ '\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}'"
    r"|'[^'\"\\\x00-\x1f\x7f]{0,1024}')"
)
_TERM = rf"`{_IDENT}`(?: = {_LITERAL}| IS NULL)"
_CONJUNCTION = rf"\({_TERM}(?: AND {_TERM})*\)"
_WHERE = re.compile(rf"{_CONJUNCTION}(?: OR {_CONJUNCTION})*")
_SORT_FIELD = re.compile(rf"`({_IDENT})` (ASC|DESC) NULLS (FIRST|LAST)")
_ZORDER = re.compile(rf"zorder\((`{_IDENT}`(?:, `{_IDENT}`)+)\)")


def where_clause(partitions: list[list[tuple[str, str]]]) -> str:
    """`(col = literal AND …) OR (…)` from (quoted column, literal or 'IS NULL') terms."""
    parts = []
    for terms in partitions:
        parts.append(
            "("
            + " AND ".join(
                f"{col} IS NULL" if lit == "IS NULL" else f"{col} = {lit}" for col, lit in terms
            )
            + ")"
        )
    return " OR ".join(dict.fromkeys(parts))  # the same values under two specs: once


def sort_order(kind: str, columns: list[str]) -> str:
    """Iceberg's `sort_order` argument: a sort order, or a Z-order over the columns."""
    if not columns:
        raise PlanRejected("no columns to lay out by")
    quoted = [sql.column(c) for c in columns]
    if kind == "zorder":
        if len(quoted) < 2:
            raise PlanRejected("Z-order needs two or more columns")
        return f"zorder({', '.join(quoted)})"
    return ", ".join(f"{q} ASC NULLS LAST" for q in quoted)


# --- the commit verdict ---------------------------------------------------------------


def _kind_of(policy: LayoutPolicy) -> str:
    return "zorder" if isinstance(policy, ZOrderPolicy) else "clustering"


def event_verdict(policy: LayoutPolicy, facts: EventFacts) -> Verdict:
    """Enough new files since the last layout task may have spoilt the layout: plan one
    (the planner measures whether it really did)."""
    kind = _kind_of(policy)
    added = facts.files_added_since_last_task
    metrics = {
        "files_added_since_last_task": added,
        "threshold_min_changed_files": policy.min_changed_files,
        "columns": list(policy.columns),
        "threshold_max_files_per_lookup": policy.max_files_per_lookup,
    }
    if not policy.enabled:
        return Verdict(False, f"{kind} is disabled by policy", metrics)
    if not policy.columns and kind == "zorder":
        return Verdict(False, f"{kind} has no columns", metrics)
    on = policy.columns or "the table's declared sort order"
    if added >= policy.min_changed_files:
        return Verdict(
            True,
            f"{added} data files written since the last {kind} task >= "
            f"min_changed_files {policy.min_changed_files}",
            metrics,
            {
                "target": f"lookups on {on} open <= "
                f"{policy.max_files_per_lookup} files per partition",
                "target_files_per_lookup": policy.max_files_per_lookup,
                "files_written_since_last_task": added,
            },
        )
    return Verdict(
        False,
        f"{added} data files written since the last {kind} task < "
        f"min_changed_files {policy.min_changed_files}",
        metrics,
    )


# --- planning -------------------------------------------------------------------------

# (spec id, partition field name) -> (source column name, its type), identity fields only
IdentityFields = dict[tuple[int, str], tuple[str, IcebergType]]


def _describe(partition: Partition) -> str:
    if not partition:
        return "(unpartitioned)"
    return ", ".join(f"{k}={jsonable(v)}" for k, v in partition)


def _partition_terms(
    spec_id: int, partition: Partition, identity: IdentityFields
) -> list[tuple[str, str]]:
    """The (quoted column, literal) terms naming a partition; PlanRejected if it cannot be
    named exactly by identity values."""
    if not partition:
        raise PlanRejected("an unpartitioned group cannot be named")
    terms = []
    for name, value in partition:
        source = identity.get((spec_id, name))
        if source is None:
            raise PlanRejected(f"partition field {name!r} is not an identity field")
        column, ftype = source
        terms.append(
            (sql.column(column), "IS NULL" if value is None else sql_literal(value, ftype))
        )
    return terms


def plan_from_files(
    kind: str,
    policy: LayoutPolicy,
    snapshot_id: int | None,
    files: list[DataFile],
    identity: IdentityFields | None = None,
    declared: DeclaredOrder | None = None,
) -> PlanOutcome:
    """Pure planning over file descriptions (unit-tested without a table). `declared`: the
    table's sort order, which clustering sorts by when the policy names no columns."""
    if snapshot_id is None or not files:
        return PlanOutcome(None, "table has no data: nothing to lay out")
    columns = list(policy.columns)
    order_text = None
    if not columns and kind == "clustering":
        if declared is None:
            return PlanOutcome(
                None,
                "clustering names no columns and the table declares no sort order: give "
                "clustering.columns, or declare the table's sort order",
            )
        if declared.columns is None or declared.text is None:
            return PlanOutcome(
                None,
                f"clustering names no columns and the table's declared sort order "
                f"({declared.description}) cannot be used: {declared.problem}; give "
                "clustering.columns",
            )
        columns, order_text = declared.columns, declared.text
    groups: dict[tuple[int, Partition], list[DataFile]] = defaultdict(list)
    for f in files:
        groups[(f.spec_id, f.partition)].append(f)
    measured: list[tuple[int, Partition, list[DataFile], float]] = []
    for (spec_id, partition), group in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        if len(group) < 2:
            continue
        fpl = files_per_lookup(group, columns)
        if fpl is not None:
            measured.append((spec_id, partition, group, fpl))
    if not measured:
        return PlanOutcome(
            None,
            f"nothing to measure: no partition has two or more files with bounds on {columns} "
            f"({len(files)} data files in {len(groups)} partition(s))",
        )
    worst = max(measured, key=lambda m: m[3])
    poor = [m for m in measured if m[3] > policy.max_files_per_lookup]
    if not poor:
        return PlanOutcome(
            None,
            f"layout is good: the worst partition ({_describe(worst[1])}) opens {worst[3]} "
            f"files per lookup on {columns} <= max_files_per_lookup "
            f"{policy.max_files_per_lookup} ({len(measured)} partition(s) measured)",
        )

    # Name the poor partitions when every one of them is an identity partition on values
    # that have exact literals, and some partitions are left alone; else the whole table.
    where: str | None = None
    why_whole = "every partition is poor"
    if len(poor) < len(groups):
        if len(poor) > MAX_WHERE_PARTITIONS:
            why_whole = f"{len(poor)} poor partitions > {MAX_WHERE_PARTITIONS} to name"
        else:
            try:
                text = where_clause([_partition_terms(s, p, identity or {}) for s, p, _, _ in poor])
            except PlanRejected as exc:
                why_whole = f"poor partitions cannot be named by identity values: {exc}"
            else:
                if len(text) <= MAX_WHERE_CHARS:
                    where = text
                else:
                    why_whole = f"the partition filter would be {len(text)} characters"

    rewritten = (
        [(s, p, g) for s, p, g, _ in poor]
        if where is not None
        else [(s, p, g) for (s, p), g in groups.items()]
    )
    target = policy.target_file_size_bytes
    rewrite_bytes = sum(f.size for _, _, g in rewritten for f in g)
    rewrite_files = sum(len(g) for _, _, g in rewritten)
    after = sum(max(1, math.ceil(sum(f.size for f in g) / target)) for _, _, g in rewritten)
    values = [m[3] for m in poor]
    plan = {
        "action": "rewrite_data_files",
        "strategy": "sort",
        "sort_order": order_text or sort_order(kind, columns),
        "columns": columns,
        "where": where,
        "options": {
            "rewrite-all": "true",
            "target-file-size-bytes": str(target),
            # commit per file group: a conflict with a writer loses only that group
            "partial-progress.enabled": "true",
        },
        "partitions": [
            {
                "spec_id": s,
                "partition": {k: jsonable(v) for k, v in p},
                "data_files": len(g),
                "files_per_lookup": fpl,
            }
            for s, p, g, fpl in poor
        ],
        "files_before": len(files),
        "files_per_lookup_before": worst[3],  # the worst partition's
        "files_per_lookup_avg_before": round(sum(values) / len(values), 2),  # over poor ones
        "files_to_rewrite": rewrite_files,
        "bytes_to_rewrite": rewrite_bytes,
        "expected_files_after": len(files) - rewrite_files + after,
        "snapshot_id": snapshot_id,
    }
    if order_text is not None:
        plan["declared"] = declared.description if declared else None
    scope = f"{len(poor)} partition(s)" if where is not None else f"the whole table ({why_whole})"
    by = f"the table's declared order {columns}" if order_text is not None else f"{columns}"
    return PlanOutcome(
        plan,
        f"{kind} {scope} by {by}: {len(poor)} of {len(measured)} measured partition(s) "
        f"open > max_files_per_lookup {policy.max_files_per_lookup} files per lookup "
        f"(worst {_describe(worst[1])}: {worst[3]}); rewrite {rewrite_files} data files",
    )


def identity_fields(table: Table) -> IdentityFields:
    """Every spec's identity partition fields, with their source column's current name."""
    schema = table.schema()
    out: IdentityFields = {}
    for spec_id, spec in table.specs().items():
        for pf in spec.fields:
            if not isinstance(pf.transform, IdentityTransform):
                continue
            try:
                source = schema.find_field(pf.source_id)
            except ValueError:  # the column was dropped
                continue
            out[(spec_id, pf.name)] = (source.name, source.field_type)
    return out


def _planner(kind: str) -> Planner:
    def plan(policy: LayoutPolicy, table: Table, now: datetime) -> PlanOutcome:
        if isinstance(policy, ZOrderPolicy) and policy.curve != "z-order":
            return PlanOutcome(None, f"curve {policy.curve} is Hudi's only: Iceberg Z-orders")
        names = {f.name for f in table.schema().fields}
        missing = [c for c in policy.columns if c not in names]
        if missing:  # the policy was checked against the table; the schema changed since
            return PlanOutcome(None, f"{kind} columns {missing} are not columns of the table")
        declared = declared_order(table)
        columns = policy.columns or (declared.columns if declared and declared.columns else [])
        files = read_files(table, columns)
        return plan_from_files(
            kind, policy, files.snapshot_id, files.data, identity_fields(table), declared
        )

    return plan


# --- running --------------------------------------------------------------------------


def parse_sort_order(text: Any) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """('zorder', columns, []) or ('sort', columns, [(column, direction, nulls)]) from a
    sort_order string of the only shapes the planner writes; PlanRejected otherwise."""
    if not isinstance(text, str):
        raise PlanRejected(f"invalid sort_order {text!r}")
    z = _ZORDER.fullmatch(text)
    if z is not None:
        columns = [c.strip("`") for c in z.group(1).split(", ")]
        return "zorder", columns, []
    fields = []
    for part in text.split(", "):
        m = _SORT_FIELD.fullmatch(part)
        if m is None:
            raise PlanRejected(f"invalid sort_order {text!r}")
        fields.append((m.group(1), m.group(2), m.group(3)))
    return "sort", [f[0] for f in fields], fields


def _check_where(where: Any) -> str | None:
    if where is None:
        return None
    if not isinstance(where, str) or len(where) > MAX_WHERE_CHARS or not _WHERE.fullmatch(where):
        raise PlanRejected(f"invalid where {str(where)[:200]!r}")
    return where


def _quote_arg(text: str) -> str:
    """A procedure's string argument. The validated pieces hold no backslash, and quotes
    only around literals; Spark unescapes \\' by default."""
    if "\\" in text:
        raise PlanRejected("backslash in a procedure argument")
    return "'" + text.replace("'", "\\'") + "'"


def layout_sql(catalog: str, ref: TableRef, plan: dict[str, Any]) -> str:
    """The CALL statement for a clustering / Z-order plan (pure; tested without Spark).

    Every piece of the stored plan is checked again: the action and strategy, the sort
    order (re-parsed; its columns must be the plan's columns), the options (allowed keys,
    plain values) and the where text (the planner's grammar only)."""
    if plan.get("action") != "rewrite_data_files" or plan.get("strategy") != "sort":
        raise PlanRejected(f"not a layout plan: {plan.get('action')}/{plan.get('strategy')}")
    _, columns, _ = parse_sort_order(plan.get("sort_order"))
    if plan.get("columns") != columns or len(set(columns)) != len(columns):
        raise PlanRejected(
            f"sort_order columns {columns} do not match the plan's {plan.get('columns')!r}"
        )
    for c in columns:
        sql.column(c)
    options = plan.get("options", {})
    if not isinstance(options, dict):
        raise PlanRejected("options must be a map")
    opts = sql.option_map(options, OPTIONS)
    where = _check_where(plan.get("where"))
    statement = (
        f"{sql.procedure(catalog, 'rewrite_data_files')}(table => {sql.table_arg(catalog, ref)}, "
        f"strategy => 'sort', sort_order => {_quote_arg(plan['sort_order'])}, "
        f"options => {opts}"
    )
    if where is not None:
        statement += f", where => {_quote_arg(where)}"
    return statement + ")"


def _runner(kind: str) -> Runner:
    def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
        """Validated as `layout_sql`, then run through Iceberg's Java action with exactly
        those arguments: the procedure's SQL form cannot put the task id and attempt into
        the commit, and the scheduler relies on them never to commit a task twice."""
        layout_sql(catalog, ref, plan)
        shape, columns, fields = parse_sort_order(plan["sort_order"])
        if shape != ("zorder" if kind == "zorder" else "sort"):
            raise PlanRejected(f"a {kind} task cannot run a {shape} sort order")
        where = _check_where(plan.get("where"))

        def configure(action: Any, table: Any, jvm: Any) -> Any:
            if shape == "zorder":
                names = spark.sparkContext._gateway.new_array(  # type: ignore[union-attr]
                    jvm.java.lang.String, len(columns)
                )
                for i, c in enumerate(columns):
                    names[i] = c
                action = action.zOrder(names)
            else:
                nulls = jvm.org.apache.iceberg.NullOrder
                order = jvm.org.apache.iceberg.SortOrder.builderFor(table.schema())
                for column, direction, null_order in fields:
                    null = nulls.NULLS_FIRST if null_order == "FIRST" else nulls.NULLS_LAST
                    order = (
                        order.asc(column, null) if direction == "ASC" else order.desc(column, null)
                    )
                action = action.sort(order.build())
            if where is not None:
                # What the procedure does with its `where` argument, on the validated text.
                converter = jvm.org.apache.spark.sql.execution.datasources.SparkExpressionConverter
                expr = converter.collectResolvedSparkExpression(
                    spark._jsparkSession, ref.spark_name(catalog), where
                )
                action = action.filter(converter.convertToIcebergExpression(expr))
            return action

        metrics: dict[str, Any] = rewrite_data_files(
            spark, catalog, ref, plan.get("options", {}), configure
        )
        committed = metrics.pop(COMMITTED, None)
        if committed is None and metrics["rewritten_data_files"]:
            committed = history.newest_rewrite(spark, ref.spark_name(catalog))
        return JobResult(metrics, committed)

    return run


CLUSTERING = Kind(
    name="clustering",
    plan=_planner("clustering"),
    run=_runner("clustering"),
    event_verdict=event_verdict,
)
ZORDER = Kind(
    name="zorder", plan=_planner("zorder"), run=_runner("zorder"), event_verdict=event_verdict
)
