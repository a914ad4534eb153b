"""Clean: expire old snapshots, remove orphan files, rewrite manifests. One task runs the
actions its plan lists, in that order, each with Iceberg's own procedure.

Safety is Iceberg's and ours: expiry never removes the current snapshot or one a branch
or tag references; orphan removal lists (dry run) before it deletes, never touches a
file any live snapshot references, and spares files younger than the safety window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table

from lakewarden.catalog import TableRef
from lakewarden.kinds.base import JobResult, Kind, PlanOutcome, PlanRejected
from lakewarden.policy import CleanPolicy
from lakewarden.spark import sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ACTIONS = ("expire_snapshots", "remove_orphan_files", "rewrite_manifests")
ORPHAN_SAMPLE = 20


@dataclass(frozen=True)
class TableState:
    """What clean planning reads from table metadata (pure data, unit-testable)."""

    current_snapshot_id: int | None
    snapshots: list[tuple[int, datetime]]  # (id, committed at)
    referenced: set[int]  # snapshots that branches and tags point to
    manifest_sizes: list[int]  # manifests of the current snapshot


def read_state(table: Table) -> TableState:
    current = table.current_snapshot()
    return TableState(
        current_snapshot_id=current.snapshot_id if current else None,
        snapshots=[
            (s.snapshot_id, datetime.fromtimestamp(s.timestamp_ms / 1000, tz=UTC))
            for s in table.snapshots()
        ],
        referenced={ref.snapshot_id for ref in table.metadata.refs.values()},
        manifest_sizes=[m.manifest_length for m in current.manifests(table.io)] if current else [],
    )


def plan_from_state(policy: CleanPolicy, state: TableState, now: datetime) -> PlanOutcome:
    if state.current_snapshot_id is None:
        return PlanOutcome(None, "table has no snapshot: nothing to clean")
    actions: list[dict[str, Any]] = []
    reasons: list[str] = []
    older_than = now - timedelta(hours=policy.max_snapshot_age_hours)
    newest_first = sorted(state.snapshots, key=lambda s: s[1], reverse=True)
    expirable = [
        sid
        for sid, at in newest_first[policy.keep_last_snapshots :]
        if at < older_than and sid != state.current_snapshot_id and sid not in state.referenced
    ]
    if expirable:
        actions.append(
            {
                "name": "expire_snapshots",
                "older_than": older_than.isoformat(),
                "retain_last": policy.keep_last_snapshots,
                "expected_expired": len(expirable),
            }
        )
        reasons.append(
            f"{len(expirable)} of {len(state.snapshots)} snapshots are older than "
            f"{policy.max_snapshot_age_hours:g} h beyond the last "
            f"{policy.keep_last_snapshots}"
        )
    if policy.remove_orphans:
        orphan_before = now - timedelta(hours=policy.orphan_min_age_hours)
        actions.append({"name": "remove_orphan_files", "older_than": orphan_before.isoformat()})
        reasons.append(f"remove unreferenced files older than {policy.orphan_min_age_hours:g} h")
    count = len(state.manifest_sizes)
    if count >= policy.rewrite_manifests_min_count:
        actions.append({"name": "rewrite_manifests", "manifests_before": count})
        reasons.append(
            f"{count} manifests >= rewrite_manifests_min_count {policy.rewrite_manifests_min_count}"
        )
    if not actions:
        return PlanOutcome(
            None,
            f"nothing to clean: {len(state.snapshots)} snapshots (none expirable), "
            f"{count} manifests < {policy.rewrite_manifests_min_count}, orphan removal off",
        )
    plan = {
        "action": "clean",
        "actions": actions,
        "snapshot_id": state.current_snapshot_id,
        "snapshots_before": len(state.snapshots),
        "protected_snapshots": sorted(state.referenced | {state.current_snapshot_id}),
        "manifests_before": count,
        "manifest_bytes": sum(state.manifest_sizes),
        "expected_manifests_after": max(1, math.ceil(sum(state.manifest_sizes) / (8 << 20)))
        if any(a["name"] == "rewrite_manifests" for a in actions)
        else count,
    }
    return PlanOutcome(plan, "; ".join(reasons))


def plan(policy: CleanPolicy, table: Table, now: datetime) -> PlanOutcome:
    return plan_from_state(policy, read_state(table), now)


def _when(action: dict[str, Any]) -> datetime:
    return sql.aware_datetime(action.get("older_than"), "older_than")


def clean_sql(catalog: str, ref: TableRef, action: dict[str, Any], *, dry_run: bool = False) -> str:
    """One procedure call of a clean plan (pure; tested without Spark)."""
    name = action.get("name")
    if name not in ACTIONS:
        raise PlanRejected(f"unknown clean action {name!r}")
    head = f"{sql.procedure(catalog, str(name))}(table => {sql.table_arg(catalog, ref)}"
    if name == "expire_snapshots":
        retain = action.get("retain_last")
        if not isinstance(retain, int) or retain < 1:
            raise PlanRejected(f"invalid retain_last {retain!r}")
        return (
            f"{head}, older_than => {sql.timestamp_literal(_when(action))}, "
            f"retain_last => {retain})"
        )
    if name == "remove_orphan_files":
        return (
            f"{head}, older_than => {sql.timestamp_literal(_when(action))}, "
            f"dry_run => {'true' if dry_run else 'false'})"
        )
    return f"{head})"


def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
    if plan.get("action") != "clean":
        raise PlanRejected(f"not a clean plan: {plan.get('action')}")
    actions = plan.get("actions") or []
    for action in actions:  # validate every statement before running any
        clean_sql(catalog, ref, action)
    metrics: dict[str, Any] = {}
    committed = None
    for action in actions:
        name = action["name"]
        if name == "remove_orphan_files":
            listed = [
                r[0] for r in spark.sql(clean_sql(catalog, ref, action, dry_run=True)).collect()
            ]
            metrics["orphans_listed"] = len(listed)
            metrics["orphans_sample"] = listed[:ORPHAN_SAMPLE]
            if listed:
                removed = spark.sql(clean_sql(catalog, ref, action)).collect()
                metrics["orphans_removed"] = len(removed)
            else:
                metrics["orphans_removed"] = 0
            continue
        row = spark.sql(clean_sql(catalog, ref, action)).collect()[0].asDict()
        if name == "expire_snapshots":
            metrics["expired_data_files"] = row.get("deleted_data_files_count", 0)
            metrics["expired_manifest_files"] = row.get("deleted_manifest_files_count", 0)
            metrics["expired_manifest_lists"] = row.get("deleted_manifest_lists_count", 0)
        else:
            metrics["rewritten_manifests"] = row.get("rewritten_manifests_count", 0)
            metrics["added_manifests"] = row.get("added_manifests_count", 0)
            if metrics["rewritten_manifests"]:
                committed = sql.latest_snapshot(spark, catalog, ref, "replace")
    return JobResult(metrics, committed)


KIND = Kind(name="clean", plan=plan, run=run, swept=True)
