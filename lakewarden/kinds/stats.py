"""Column statistics (issue 32 §1): Iceberg's own `compute_table_stats` writes per-column
distinct-count sketches (Apache DataSketches theta, in a Puffin file) for a snapshot and
registers them in the table's metadata, where engines such as Trino read them to plan joins.

A statistics file describes one snapshot; a table that changed since is described less and
less well. A task is due when the table has no statistics, when a rewrite (`replace`) changed
its files since the snapshot they describe, or when they describe a snapshot older than
`max_age_hours` and the table changed since. Off by default: it reads every row of the named
columns. Computing statistics commits no snapshot (the metadata gains a statistics file), so
a retry computes them again, which is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table

from lakewarden.catalogs.catalog import TableRef
from lakewarden.kinds.base import EventFacts, JobResult, Kind, PlanOutcome, PlanRejected, Verdict
from lakewarden.policy.model import StatsPolicy
from lakewarden.spark import sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REWRITE = "replace"  # a snapshot operation that rewrote files without changing rows


@dataclass(frozen=True)
class Change:
    """A snapshot of main after the one the statistics describe."""

    snapshot_id: int
    operation: str
    files_changed: int  # data files added plus removed


@dataclass(frozen=True)
class StatsState:
    """What planning reads from the table's metadata (pure data, unit-testable)."""

    current_snapshot_id: int | None
    # The newest ancestor of the current snapshot that has statistics, and when it was made.
    stats_snapshot_id: int | None = None
    stats_snapshot_at: datetime | None = None
    stats_columns: frozenset[str] = frozenset()  # the columns its sketches cover
    changes: list[Change] = field(default_factory=list)  # main's snapshots after it
    columns: list[str] = field(default_factory=list)  # the table's top-level columns
    sketchable: list[str] = field(default_factory=list)  # those of a primitive type


def read_state(table: Table) -> StatsState:
    current = table.current_snapshot()
    schema = table.schema()
    columns = [f.name for f in schema.fields]
    sketchable = [f.name for f in schema.fields if f.field_type.is_primitive]
    if current is None:
        return StatsState(None, columns=columns, sketchable=sketchable)
    by_snapshot = {s.snapshot_id: s for s in table.metadata.statistics}
    changes: list[Change] = []
    snapshot: Any = current
    while snapshot is not None and snapshot.snapshot_id not in by_snapshot:
        summary = snapshot.summary
        changed = 0
        operation = "unknown"
        if summary is not None:
            operation = summary.operation.value
            for key in ("added-data-files", "deleted-data-files"):
                changed += int(summary.get(key) or 0)
        changes.append(Change(snapshot.snapshot_id, operation, changed))
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    if snapshot is None:
        return StatsState(
            current.snapshot_id, changes=changes, columns=columns, sketchable=sketchable
        )
    stats = by_snapshot[snapshot.snapshot_id]
    covered = set()
    for blob in stats.blob_metadata:
        for field_id in blob.fields:
            try:
                covered.add(schema.find_field(field_id).name)
            except ValueError:  # a dropped column
                continue
    return StatsState(
        current.snapshot_id,
        snapshot.snapshot_id,
        datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=UTC),
        frozenset(covered),
        changes,
        columns,
        sketchable,
    )


def plan_from_state(policy: StatsPolicy, state: StatsState, now: datetime) -> PlanOutcome:
    """Pure planning (unit-tested without a table)."""
    if state.current_snapshot_id is None:
        return PlanOutcome(None, "table has no snapshot: no statistics to compute")
    missing = [c for c in policy.columns if c not in state.columns]
    if missing:
        return PlanOutcome(None, f"stats columns {missing} are not columns of the table")
    # Iceberg sketches primitive columns only: with none named, every top-level one.
    wanted = list(policy.columns) or list(state.sketchable)
    if not wanted:
        return PlanOutcome(None, "the table has no primitive column to compute statistics of")
    why: str | None = None
    if state.stats_snapshot_id is None:
        why = "the table has no column statistics"
    else:
        age_h = (now - (state.stats_snapshot_at or now)).total_seconds() / 3600
        described = f"statistics of snapshot {state.stats_snapshot_id} ({age_h:.1f} h old)"
        lacking = [c for c in wanted if c not in state.stats_columns]
        rewrites = [c for c in state.changes if c.operation == REWRITE]
        changed = sum(c.files_changed for c in state.changes)
        if lacking:
            why = f"{described} do not cover {lacking}"
        elif rewrites:
            why = (
                f"{len(rewrites)} rewrite(s) changed files since the {described}, "
                f"{changed} data files added or removed in {len(state.changes)} snapshot(s)"
            )
        elif not state.changes:
            return PlanOutcome(None, f"statistics are fresh: {described} is the current one")
        elif age_h >= policy.max_age_hours:
            why = (
                f"{described} >= max_age_hours {policy.max_age_hours:g}, and "
                f"{len(state.changes)} snapshot(s) since changed {changed} data files"
            )
        else:
            return PlanOutcome(
                None,
                f"statistics are fresh enough: {described} < max_age_hours "
                f"{policy.max_age_hours:g}, no rewrite since ({len(state.changes)} "
                f"snapshot(s), {changed} data files changed)",
            )
    plan = {
        "action": "compute_table_stats",
        "snapshot_id": state.current_snapshot_id,
        "columns": wanted,
        "columns_from_policy": bool(policy.columns),
        "stats_snapshot_before": state.stats_snapshot_id,
        "snapshots_since": len(state.changes),
    }
    return PlanOutcome(
        plan,
        f"{why}: compute distinct-count sketches of {wanted} at snapshot "
        f"{state.current_snapshot_id}",
    )


def plan(policy: StatsPolicy, table: Table, now: datetime) -> PlanOutcome:
    return plan_from_state(policy, read_state(table), now)


def event_verdict(policy: StatsPolicy, facts: EventFacts) -> Verdict:
    """A rewrite's commit makes the statistics of the snapshot before it stale at once; other
    commits wait for the sweep (`interval_minutes`, judged against `max_age_hours`)."""
    operation = facts.summary.get("operation")
    metrics = {"operation": operation}
    if not policy.enabled:
        return Verdict(False, "stats is disabled by policy", metrics)
    if operation == REWRITE:
        return Verdict(
            True,
            "a rewrite committed: the statistics of the snapshot before it are stale",
            metrics,
            {"target": "column statistics of the current snapshot"},
        )
    return Verdict(
        False,
        f"a {operation} commit: statistics are judged by the sweep (max_age_hours "
        f"{policy.max_age_hours:g})",
        metrics,
    )


def stats_sql(catalog: str, ref: TableRef, plan: dict[str, Any]) -> str:
    """The CALL statement of a stats plan (pure; tested without Spark)."""
    if plan.get("action") != "compute_table_stats":
        raise PlanRejected(f"not a stats plan: {plan.get('action')}")
    snapshot_id = plan.get("snapshot_id")
    if isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int):
        raise PlanRejected(f"invalid snapshot_id {snapshot_id!r}")
    columns = plan.get("columns")
    if not isinstance(columns, list) or not columns:
        raise PlanRejected("a stats plan names its columns")
    for column in columns:
        sql.column(str(column))  # identifiers only: the names go into string literals
    statement = (
        f"{sql.procedure(catalog, 'compute_table_stats')}(table => "
        f"{sql.table_arg(catalog, ref)}, snapshot_id => {snapshot_id}"
    )
    return statement + ", columns => array(" + ", ".join(f"'{c}'" for c in columns) + "))"


def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
    rows = spark.sql(stats_sql(catalog, ref, plan)).collect()
    path = rows[0].asDict().get("statistics_file") if rows else None
    metrics = {
        "statistics_file": path,
        "snapshot_id": plan["snapshot_id"],
        "columns": plan["columns"],
    }
    return JobResult(metrics, None)


KIND = Kind(name="stats", plan=plan, run=run, event_verdict=event_verdict, swept=True)
