"""Clustering (sort by columns) and Z-order: rewrite the partitions whose layout makes
lookups on the policy's columns open many files, measured from column bounds alone
(lakewarden.layout.files_per_lookup)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table

from lakewarden.catalog import IDENTIFIER, TableRef
from lakewarden.kinds.base import (
    EventFacts,
    JobResult,
    Kind,
    Planner,
    PlanOutcome,
    PlanRejected,
    Verdict,
)
from lakewarden.layout import files_per_lookup
from lakewarden.metadata import DataFile, Partition, jsonable, read_files
from lakewarden.policy import ClusteringPolicy, ZOrderPolicy
from lakewarden.spark import sql
from lakewarden.spark.actions import rewrite_data_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LayoutPolicy = ClusteringPolicy | ZOrderPolicy


def event_verdict(policy: _LayoutPolicy, facts: EventFacts) -> Verdict:
    added = facts.files_added_since_last_task
    metrics = {
        "files_added_since_last_task": added,
        "threshold_min_changed_files": policy.min_changed_files,
    }
    if added >= policy.min_changed_files:
        return Verdict(
            True,
            f"{added} data files written since the last layout rewrite >= "
            f"min_changed_files {policy.min_changed_files}",
            metrics,
            {"target_files_per_lookup": policy.max_files_per_lookup},
        )
    return Verdict(
        False,
        f"{added} data files written since the last layout rewrite < "
        f"min_changed_files {policy.min_changed_files}",
        metrics,
    )


def plan_from_files(
    kind: str,
    policy: _LayoutPolicy,
    snapshot_id: int | None,
    files: list[DataFile],
    identity_columns: dict[str, str],
) -> PlanOutcome:
    """Pure planning. `identity_columns` maps identity partition fields to their columns."""
    if snapshot_id is None or not files:
        return PlanOutcome(None, "table has no data: nothing to lay out")
    groups: dict[Partition, list[DataFile]] = defaultdict(list)
    for f in files:
        groups[f.partition].append(f)
    measured = []
    for partition, group in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        if len(group) < 2:
            continue
        fpl = files_per_lookup(group, policy.columns)
        if fpl is not None:
            measured.append((partition, len(group), fpl))
    poor = [m for m in measured if m[2] > policy.max_files_per_lookup]
    if not poor:
        worst = max((m[2] for m in measured), default=None)
        return PlanOutcome(
            None,
            f"layout is good: worst partition opens {worst} files per lookup on "
            f"{policy.columns} <= max_files_per_lookup {policy.max_files_per_lookup}"
            if worst is not None
            else f"no partition has two files with bounds on {policy.columns}",
        )
    # Rewrite only the poor partitions when they can be named by identity values.
    partition_filter = None
    if len(poor) < len(groups) and all(
        name in identity_columns and isinstance(value, int | str | bool)
        for partition, _, _ in poor
        for name, value in partition
    ):
        partition_filter = [
            {identity_columns[name]: value for name, value in partition} for partition, _, _ in poor
        ]
    plan = {
        "action": "rewrite_data_files",
        "strategy": "zorder" if kind == "zorder" else "sort",
        "columns": list(policy.columns),
        "partition_filter": partition_filter,
        "options": {
            "rewrite-all": "true",
            "target-file-size-bytes": str(policy.target_file_size_bytes),
            "partial-progress.enabled": "true",
        },
        "partitions": [
            {"partition": {k: jsonable(v) for k, v in p}, "data_files": n, "files_per_lookup": fpl}
            for p, n, fpl in poor
        ],
        "files_before": len(files),
        "files_per_lookup_before": max(m[2] for m in poor),
        "snapshot_id": snapshot_id,
    }
    where = "the whole table" if partition_filter is None else f"{len(poor)} partition(s)"
    return PlanOutcome(
        plan,
        f"{kind} {where} by {policy.columns}: worst partition opens "
        f"{plan['files_per_lookup_before']} files per lookup > {policy.max_files_per_lookup}",
    )


def _planner(kind: str) -> Planner:
    def plan(policy: _LayoutPolicy, table: Table, now: datetime) -> PlanOutcome:
        spec = table.spec()
        schema = table.schema()
        identity = {
            pf.name: schema.find_column_name(pf.source_id) or pf.name
            for pf in spec.fields
            if str(pf.transform) == "identity"
        }
        files = read_files(table, policy.columns)
        return plan_from_files(kind, policy, files.snapshot_id, files.data, identity)

    return plan


def _validate(plan: dict[str, Any]) -> None:
    if plan.get("action") != "rewrite_data_files" or plan.get("strategy") not in ("sort", "zorder"):
        raise PlanRejected(f"not a layout plan: {plan.get('action')}/{plan.get('strategy')}")
    columns = plan.get("columns") or []
    if not columns or not all(isinstance(c, str) and IDENTIFIER.match(c) for c in columns):
        raise PlanRejected(f"invalid columns {columns!r}")
    sql.option_map(
        plan.get("options", {}),
        frozenset({"rewrite-all", "target-file-size-bytes", "partial-progress.enabled"}),
    )
    for part in plan.get("partition_filter") or []:
        for column, value in part.items():
            if not IDENTIFIER.match(column) or not isinstance(value, int | str | bool):
                raise PlanRejected(f"invalid partition filter {column}={value!r}")


def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
    _validate(plan)
    columns: list[str] = plan["columns"]

    def configure(action: Any, table: Any, jvm: Any) -> Any:
        if plan["strategy"] == "zorder":
            names = spark.sparkContext._gateway.new_array(jvm.java.lang.String, len(columns))  # type: ignore[union-attr]
            for i, c in enumerate(columns):
                names[i] = c
            action = action.zOrder(names)
        else:
            order = jvm.org.apache.iceberg.SortOrder.builderFor(table.schema())
            for c in columns:
                order = order.asc(c, jvm.org.apache.iceberg.NullOrder.NULLS_LAST)
            action = action.sort(order.build())
        parts = plan.get("partition_filter")
        if parts:
            exprs = jvm.org.apache.iceberg.expressions.Expressions
            both, either = getattr(exprs, "and"), getattr(exprs, "or")  # Python keywords
            combined = exprs.alwaysFalse()
            for part in parts:
                conj = exprs.alwaysTrue()
                for column, value in part.items():
                    conj = both(conj, exprs.equal(column, value))
                combined = either(combined, conj)
            action = action.filter(combined)
        return action

    metrics = rewrite_data_files(spark, catalog, ref, plan.get("options", {}), configure)
    committed = (
        sql.latest_snapshot(spark, catalog, ref, "replace")
        if metrics["rewritten_data_files"]
        else None
    )
    return JobResult(metrics, committed)


CLUSTERING = Kind(
    name="clustering", plan=_planner("clustering"), run=run, event_verdict=event_verdict
)
ZORDER = Kind(name="zorder", plan=_planner("zorder"), run=run, event_verdict=event_verdict)
