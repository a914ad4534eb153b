"""Clean: expire old snapshots, remove orphan files, rewrite manifests. One task runs the
actions its plan lists, in that order, each with Iceberg's own procedure.

Safety is Iceberg's and ours: expiry never removes the current snapshot, a snapshot a
branch or tag references, or the newest `keep_last_snapshots` ancestors of each branch;
orphan removal lists (dry run) before it deletes, with the same `older_than`, never
touches a file a live snapshot references, and spares files younger than the safety
window (at least 24 hours, checked again when the job runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table

from lakewarden import object_store
from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.iceberg import finder
from lakewarden.formats.iceberg.history import snapshots_table
from lakewarden.kinds.base import JobResult, Kind, PlanOutcome, PlanRejected
from lakewarden.policy.model import MAIN_BRANCH, CleanPolicy
from lakewarden.refs import list_refs
from lakewarden.spark import sql
from lakewarden.spark.actions import load_java_table, storage_now
from lakewarden.spark.commits import before_commit
from lakewarden.tasks.runs import last_run_with

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from sqlalchemy.orm import Session

ACTIONS = ("expire_snapshots", "remove_orphan_files", "rewrite_manifests")
ORPHAN_SAMPLE = 20
ORPHAN_MIN_AGE = timedelta(hours=24)  # Iceberg's procedure refuses less, and so do we
MANIFEST_TARGET_BYTES = 8 << 20  # Iceberg's commit.manifest.target-size-bytes default


@dataclass(frozen=True)
class Ref:
    """A branch or tag, with its own retention overrides (None: the procedure's arguments)."""

    kind: str  # "branch" | "tag"
    snapshot_id: int
    min_snapshots_to_keep: int | None = None
    max_snapshot_age_ms: int | None = None
    # From then on the expiry drops the ref itself (max-ref-age: lakewarden.refs); None: never.
    lapses_at: datetime | None = None


@dataclass(frozen=True)
class TableState:
    """What clean planning reads from table metadata (pure data, unit-testable)."""

    current_snapshot_id: int | None
    snapshots: list[tuple[int, datetime]]  # (id, committed at)
    referenced: set[int]  # snapshots that branches and tags point to
    manifest_sizes: list[int]  # manifests of the current snapshot
    # snapshot id -> parent id; empty: unknown (the snapshots are taken as one chain in time)
    parents: dict[int, int | None] = field(default_factory=dict)
    refs: dict[str, Ref] = field(default_factory=dict)  # name -> ref


def read_state(table: Table) -> TableState:
    current = table.current_snapshot()
    refs = {
        r.name: Ref(
            r.type, r.snapshot_id, r.min_snapshots_to_keep, r.max_snapshot_age_ms, r.lapses_at
        )
        for r in list_refs(table, datetime.now(UTC))
    }
    return TableState(
        current_snapshot_id=current.snapshot_id if current else None,
        snapshots=[
            (s.snapshot_id, datetime.fromtimestamp(s.timestamp_ms / 1000, tz=UTC))
            for s in table.snapshots()
        ],
        referenced={r.snapshot_id for r in refs.values()},
        manifest_sizes=[m.manifest_length for m in current.manifests(table.io)] if current else [],
        parents={s.snapshot_id: s.parent_snapshot_id for s in table.snapshots()},
        refs=refs,
    )


def _ancestors(state: TableState, head: int) -> list[int]:
    """`head` and its ancestors, newest first."""
    if not state.parents:  # ancestry unknown: the snapshots up to head, in time order
        at = dict(state.snapshots)
        return [
            sid
            for sid, when in sorted(state.snapshots, key=lambda s: s[1], reverse=True)
            if head in at and when <= at[head]
        ]
    out: list[int] = []
    sid: int | None = head
    while sid is not None and sid in state.parents and sid not in out:
        out.append(sid)
        sid = state.parents[sid]
    return out


def live_refs(state: TableState, now: datetime) -> dict[str, Ref]:
    """The refs the expiry keeps: all but those past their max-ref-age."""
    return {n: r for n, r in state.refs.items() if r.lapses_at is None or r.lapses_at >= now}


def retained_snapshots(state: TableState, policy: CleanPolicy, now: datetime) -> dict[int, str]:
    """What Iceberg's expire_snapshots(older_than, retain_last) keeps, and why (estimate of
    its rules: each branch keeps its newest retain_last ancestors, or its own
    min-snapshots-to-keep, plus those younger than the age limit; tags keep their snapshot).
    A ref past its max-ref-age keeps nothing: the expiry drops it first."""
    older_than = now - timedelta(hours=policy.max_snapshot_age_hours)
    at = dict(state.snapshots)
    why: dict[int, str] = {}
    if state.current_snapshot_id is not None:
        why[state.current_snapshot_id] = "current"
    live = live_refs(state, now)
    branches = {n: r for n, r in live.items() if r.kind == "branch"}
    if not branches and state.current_snapshot_id is not None:
        branches = {MAIN_BRANCH: Ref("branch", state.current_snapshot_id)}
    for name, ref in sorted(live.items()):
        if ref.kind == "tag":
            why.setdefault(ref.snapshot_id, f"tag {name}")
    lapsed = {r.snapshot_id for n, r in state.refs.items() if n not in live}
    for sid in state.referenced - (lapsed - {r.snapshot_id for r in live.values()}):
        why.setdefault(sid, "referenced by a branch or tag")
    in_history: set[int] = set()
    for name, ref in sorted(branches.items()):
        why.setdefault(ref.snapshot_id, f"branch {name}")
        keep = ref.min_snapshots_to_keep or policy.keep_last_snapshots
        limit = (
            now - timedelta(milliseconds=ref.max_snapshot_age_ms)
            if ref.max_snapshot_age_ms is not None
            else older_than
        )
        for i, sid in enumerate(_ancestors(state, ref.snapshot_id)):
            in_history.add(sid)
            if i < keep:
                why.setdefault(sid, f"one of the last {keep} of branch {name}")
            elif sid in at and at[sid] >= limit:
                why.setdefault(sid, f"younger than the age limit (branch {name})")
    for sid, when in state.snapshots:  # in no branch's history: only age protects them
        if sid not in why and sid not in in_history and when >= older_than:
            why[sid] = "younger than the age limit"
    return why


def plan_from_state(
    policy: CleanPolicy,
    state: TableState,
    now: datetime,
    manifest_min_avg_bytes: int | None = None,
    last_orphan_removal: datetime | None = None,
) -> PlanOutcome:
    """Pure clean planning over table metadata (unit-tested without a table).

    `manifest_min_avg_bytes`: also rewrite two or more manifests whose average size is
    below this (None: only the count rule applies). `last_orphan_removal`: when orphan
    removal last ran on the table (`history`), for `orphan_interval_minutes`.
    """
    if state.current_snapshot_id is None:
        return PlanOutcome(None, "table has no snapshot: nothing to clean")
    now = now.astimezone(UTC)
    actions: list[dict[str, Any]] = []
    reasons: list[str] = []
    n = len(state.snapshots)
    ages_h = [(now - at).total_seconds() / 3600 for _, at in state.snapshots]

    older_than = now - timedelta(hours=policy.max_snapshot_age_hours)
    retained = retained_snapshots(state, policy, now)
    expirable = sorted(sid for sid, at in state.snapshots if sid not in retained)
    if n > policy.keep_last_snapshots and expirable:
        actions.append(
            {
                "name": "expire_snapshots",
                "older_than": older_than.isoformat(),
                "retain_last": policy.keep_last_snapshots,
                "expected_expired": len(expirable),
                "expected_snapshots_after": n - len(expirable),
            }
        )
        reasons.append(
            f"{len(expirable)} of {n} snapshots are older than "
            f"{policy.max_snapshot_age_hours:g} h and beyond the last "
            f"{policy.keep_last_snapshots} (branches and tags keep theirs)"
        )
    orphans = orphan_due(policy, last_orphan_removal, now)
    if policy.remove_orphans and not orphans.due:
        reasons.append(orphans.reason)
    if orphans.due:
        orphan_before = now - timedelta(hours=policy.orphan_min_age_hours)
        actions.append(
            {
                "name": "remove_orphan_files",
                "older_than": orphan_before.isoformat(),
                # the job judges ages again on the storage's own clock
                "min_age_hours": policy.orphan_min_age_hours,
                "dry_run_first": True,
            }
        )
        reasons.append(
            f"remove files no snapshot references and older than "
            f"{policy.orphan_min_age_hours:g} h (listed by a dry run first)"
        )

    count, total = len(state.manifest_sizes), sum(state.manifest_sizes)
    avg = total / count if count else 0.0
    expected_manifests = max(1, math.ceil(total / MANIFEST_TARGET_BYTES)) if count else 0
    rewrite = None
    if count >= policy.rewrite_manifests_min_count:
        rewrite = (
            f"{count} manifests >= rewrite_manifests_min_count {policy.rewrite_manifests_min_count}"
        )
    elif manifest_min_avg_bytes is not None and count >= 2 and avg < manifest_min_avg_bytes:
        rewrite = f"{count} manifests averaging {avg:.0f} bytes < {manifest_min_avg_bytes}"
    if rewrite is not None:
        actions.append(
            {
                "name": "rewrite_manifests",
                "manifests_before": count,
                "expected_manifests_after": expected_manifests,
            }
        )
        reasons.append(rewrite)

    if not actions:
        avg_rule = (
            f", avg {avg:.0f} bytes >= {manifest_min_avg_bytes}"
            if manifest_min_avg_bytes is not None and count >= 2
            else ""
        )
        return PlanOutcome(
            None,
            f"nothing to clean: {n} snapshots (keep_last {policy.keep_last_snapshots}, none "
            f"older than {policy.max_snapshot_age_hours:g} h beyond them and unprotected), "
            f"{count} manifests < rewrite_manifests_min_count "
            f"{policy.rewrite_manifests_min_count}{avg_rule}, {orphans.reason}",
        )
    plan = {
        "action": "clean",
        "actions": actions,
        "snapshot_id": state.current_snapshot_id,
        "snapshots_before": n,
        "snapshot_age_hours": {
            "oldest": round(max(ages_h), 3) if ages_h else None,
            "newest": round(min(ages_h), 3) if ages_h else None,
        },
        # past their max-ref-age: the expiry drops them, and what only they kept
        "lapsed_refs": sorted(set(state.refs) - set(live_refs(state, now))),
        # never expired: Iceberg keeps the current snapshot and those of branches and tags
        "refs": [
            {"name": name, "type": r.kind, "snapshot_id": r.snapshot_id}
            for name, r in sorted(state.refs.items())
        ],
        "protected_snapshots": sorted(
            {r.snapshot_id for r in live_refs(state, now).values()}
            | (state.referenced if not state.refs else set())
            | {state.current_snapshot_id}
        ),
        "orphan_removal": orphans.reason,
        "manifests_before": count,
        "manifest_bytes": total,
        "manifest_avg_bytes": round(avg, 1),
        "expected_manifests_after": expected_manifests if rewrite is not None else count,
    }
    return PlanOutcome(plan, "; ".join(reasons))


@dataclass(frozen=True)
class OrphanSchedule:
    due: bool
    reason: str
    next_due: datetime | None  # None: disabled, or due now


def orphan_due(policy: CleanPolicy, last: datetime | None, now: datetime) -> OrphanSchedule:
    """Whether a clean task planned now removes orphans: enabled, and never run on the
    table or `orphan_interval_minutes` since it last ran (listing is expensive)."""
    if not policy.remove_orphans:
        return OrphanSchedule(False, "orphan removal disabled", None)
    if last is None:
        return OrphanSchedule(True, "orphan removal due: never ran on this table", None)
    interval = timedelta(minutes=policy.orphan_interval_minutes)
    next_due = last + interval
    ran = f"last ran {last.astimezone(UTC).isoformat(timespec='seconds')}"
    if now < next_due:
        return OrphanSchedule(
            False,
            f"orphan removal not due: {ran}, orphan_interval_minutes "
            f"{policy.orphan_interval_minutes:g}; next due at "
            f"{next_due.astimezone(UTC).isoformat(timespec='seconds')}",
            next_due,
        )
    return OrphanSchedule(
        True,
        f"orphan removal due: {ran}, orphan_interval_minutes {policy.orphan_interval_minutes:g}",
        None,
    )


def history(session: Session, table_id: int) -> dict[str, Any]:
    """When orphan removal last ran on the table: the start of the newest succeeded clean
    run whose metrics have it (the runner records them under the action's name)."""
    return {"last_orphan_removal": last_run_with(session, table_id, "clean", "remove_orphan_files")}


def plan(
    policy: CleanPolicy, table: Table, now: datetime, last_orphan_removal: datetime | None = None
) -> PlanOutcome:
    return plan_from_state(policy, read_state(table), now, last_orphan_removal=last_orphan_removal)


# --- running ----------------------------------------------------------------------------


def _when(action: dict[str, Any]) -> datetime:
    return sql.aware_datetime(action.get("older_than"), "older_than")


def clean_sql(
    catalog: str,
    ref: TableRef,
    action: dict[str, Any],
    *,
    dry_run: bool = False,
    now: datetime | None = None,
) -> str:
    """One procedure call of a clean plan (pure; tested without Spark). With `now`, an
    `older_than` that is not safely in the past is refused."""
    name = action.get("name")
    if name not in ACTIONS:
        raise PlanRejected(f"unknown clean action {name!r}")
    head = f"{sql.procedure(catalog, str(name))}(table => {sql.table_arg(catalog, ref)}"
    if name == "rewrite_manifests":
        return f"{head})"
    when = _when(action)
    if name == "expire_snapshots":
        retain = action.get("retain_last")
        if isinstance(retain, bool) or not isinstance(retain, int) or retain < 1:
            raise PlanRejected(f"invalid retain_last {retain!r}")
        if now is not None and when >= now:
            raise PlanRejected(f"older_than {when.isoformat()} is not in the past")
        return f"{head}, older_than => {sql.timestamp_literal(when)}, retain_last => {retain})"
    if now is not None and when > now - ORPHAN_MIN_AGE:
        raise PlanRejected(
            f"older_than {when.isoformat()} is less than 24 h before now: a writer may be "
            "mid-commit"
        )
    prefix_listing = action.get("prefix_listing", False)
    if not isinstance(prefix_listing, bool):
        raise PlanRejected(f"invalid prefix_listing {prefix_listing!r}")
    # On an object store the files are listed through the table's FileIO (Hadoop has no
    # file system for s3:// here): `object_store.by_prefix`, set by the runner.
    listing = ", prefix_listing => true" if prefix_listing else ""
    return (
        f"{head}, older_than => {sql.timestamp_literal(when)}, "
        f"dry_run => {'true' if dry_run else 'false'}{listing})"
    )


def _counts(row: dict[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in row.items() if isinstance(v, int) and not isinstance(v, bool)}


def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
    if plan.get("action") != "clean":
        raise PlanRejected(f"not a clean plan: {plan.get('action')}")
    actions = plan.get("actions")
    if not isinstance(actions, list) or not actions:
        raise PlanRejected("a clean plan needs a non-empty list of actions")
    now = datetime.now(UTC)
    for action in actions:  # validate every statement before running any
        if not isinstance(action, dict):
            raise PlanRejected(f"invalid clean action {action!r}")
        clean_sql(catalog, ref, action, now=now)
    metrics: dict[str, Any] = {"actions_run": []}
    committed = None
    for action in actions:
        name = action["name"]
        metrics["actions_run"].append(name)
        if name == "remove_orphan_files":
            action, clocks = _orphan_cutoff(spark, catalog, ref, action, now)
            # The same older_than for both: what the dry run lists is what may go.
            listed = [
                r[0]
                for r in spark.sql(clean_sql(catalog, ref, action, dry_run=True, now=now)).collect()
            ]
            removed: list[str] = []
            if listed:
                before_commit()
                removed = [
                    r[0] for r in spark.sql(clean_sql(catalog, ref, action, now=now)).collect()
                ]
            unlisted = sorted(set(removed) - set(listed))
            metrics["remove_orphan_files"] = {
                **clocks,
                "older_than": action["older_than"],
                "dry_run_count": len(listed),
                "removed_count": len(removed),
                "removed_not_in_dry_run": unlisted[:ORPHAN_SAMPLE],
            }
            metrics["orphans_listed"] = len(listed)
            metrics["orphans_removed"] = len(removed)
            metrics["orphans_sample"] = sorted(listed)[:ORPHAN_SAMPLE]
            continue
        before_commit()
        if name == "expire_snapshots":
            row = spark.sql(clean_sql(catalog, ref, action, now=now)).collect()[0].asDict()
            counts = _counts(row)
            metrics["expire_snapshots"] = counts
            metrics["expired_data_files"] = counts.get("deleted_data_files_count", 0)
            metrics["expired_manifest_files"] = counts.get("deleted_manifest_files_count", 0)
            metrics["expired_manifest_lists"] = counts.get("deleted_manifest_lists_count", 0)
            continue
        before = {r[0] for r in spark.sql(_snapshot_ids(catalog, ref)).collect()}
        row = spark.sql(clean_sql(catalog, ref, action, now=now)).collect()[0].asDict()
        counts = _counts(row)
        metrics["rewrite_manifests"] = counts
        metrics["rewritten_manifests"] = counts.get("rewritten_manifests_count", 0)
        metrics["added_manifests"] = counts.get("added_manifests_count", 0)
        if metrics["rewritten_manifests"]:
            # ours: new, a 'replace' that replaced manifests (a compaction's does not)
            new = [
                c
                for c in snapshots_table(spark, ref.spark_name(catalog))
                if c.native["snapshot_id"] not in before
            ]
            ours = finder.newest(new, finder.is_manifest_rewrite)
            committed = int(ours.id) if ours else None
    return JobResult(metrics, committed)


def _orphan_cutoff(
    spark: SparkSession, catalog: str, ref: TableRef, action: dict[str, Any], now: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The orphan cutoff, judged on both clocks: the earliest of the planned one, ours now
    minus the minimum age, and the storage's own now minus the minimum age (a file's age
    is its storage timestamp, so a storage clock behind ours must not make young files old).
    """
    min_age = timedelta(hours=_min_age_hours(action))
    storage = storage_now(spark, catalog, ref)
    cut = min(_when(action), now - min_age, storage - min_age)
    location = str(load_java_table(spark, catalog, ref).location())
    clocks = {
        "storage_now": storage.isoformat(),
        "scheduler_now": now.isoformat(),
        "storage_clock_behind_s": round((now - storage).total_seconds(), 3),
        "planned_older_than": action["older_than"],
    }
    listing = {"prefix_listing": True} if object_store.by_prefix(location) else {}
    return {**action, "older_than": cut.isoformat(), **listing}, clocks


def _min_age_hours(action: dict[str, Any]) -> float:
    value = action.get("min_age_hours", ORPHAN_MIN_AGE.total_seconds() / 3600)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlanRejected(f"invalid min_age_hours {value!r}")
    return max(float(value), ORPHAN_MIN_AGE.total_seconds() / 3600)


def _snapshot_ids(catalog: str, ref: TableRef) -> str:
    return f"SELECT snapshot_id FROM {ref.spark_name(catalog)}.snapshots"


KIND = Kind(name="clean", plan=plan, run=run, swept=True, history=history)
