"""Compaction: bin-pack small files towards the target size, per partition, and rewrite
data files that delete files have hollowed out (merge-on-read tables: v2's position and
equality deletes, v3's deletion vectors, which the rewrite applies and drops)."""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table

from lakewarden import manifest_cache
from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.iceberg import history
from lakewarden.formats.iceberg.sort_order import declared_order
from lakewarden.formats.iceberg.table import open_table
from lakewarden.kinds.base import EventFacts, JobResult, Kind, PlanOutcome, PlanRejected, Verdict
from lakewarden.metadata import DataFile, KeyBucket, Partition, TableFiles, jsonable, key_buckets
from lakewarden.policy.model import MAIN_BRANCH, REF_NAME, CompactionPolicy
from lakewarden.spark import sql
from lakewarden.spark.actions import COMMITTED, rewrite_data_files
from lakewarden.states import TaskState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OPTIONS = frozenset(
    {
        "target-file-size-bytes",
        "min-file-size-bytes",
        "max-file-size-bytes",
        "min-input-files",
        "delete-ratio-threshold",
        "delete-file-threshold",
        "partial-progress.enabled",
        "partial-progress.max-commits",
        "max-concurrent-file-group-rewrites",
        "rewrite-all",
        "remove-dangling-deletes",
    }
)


def event_verdict(policy: CompactionPolicy, facts: EventFacts) -> Verdict:
    """Files beyond what the table's bytes need at the target size are 'reducible'."""
    summary = facts.summary
    files = int(summary.get("total-data-files", 0) or 0)
    size = int(summary.get("total-files-size", 0) or 0)
    deletes = int(summary.get("total-position-deletes", 0) or 0) + int(
        summary.get("total-equality-deletes", 0) or 0
    )
    records = int(summary.get("total-records", 0) or 0)
    needed = max(1, math.ceil(size / policy.target_file_size_bytes)) if files else 0
    reducible = files - needed
    deleted_ratio = round(deletes / records, 4) if records else 0.0
    metrics = {
        "total_data_files": files,
        "total_files_size": size,
        "files_needed_at_target": needed,
        "reducible_files": reducible,
        "deleted_row_ratio": deleted_ratio,
        "threshold_min_small_files": policy.min_small_files,
        "threshold_delete_ratio": policy.delete_ratio_threshold,
        "target_file_size_bytes": policy.target_file_size_bytes,
    }
    if policy.max_files_per_bucket:
        metrics["threshold_max_files_per_bucket"] = policy.max_files_per_bucket
    if not policy.enabled:
        return Verdict(False, "compaction is disabled by policy", metrics)
    if facts.last_task_state == TaskState.SKIPPED and facts.files_added_since_last_task < (
        policy.min_small_files
    ):
        # The totals cannot tell partitions apart: after a plan found nothing to merge
        # (e.g. one small file per partition), wait for enough new files before asking again.
        return Verdict(
            False,
            f"the last compaction found nothing to merge; {facts.files_added_since_last_task} "
            f"files written since < min_small_files {policy.min_small_files}",
            metrics,
        )
    if reducible >= policy.min_small_files:
        return Verdict(
            True,
            f"{reducible} reducible files >= min_small_files {policy.min_small_files} "
            f"({files} data files hold {size} bytes, {needed} would do at the target size)",
            metrics,
            {"data_files_removed_estimate": reducible},
        )
    if deleted_ratio >= policy.delete_ratio_threshold:
        return Verdict(
            True,
            f"deleted-row ratio {deleted_ratio} >= {policy.delete_ratio_threshold} "
            f"({deletes} deleted of {records} rows)",
            metrics,
            {"delete_rows_purged_estimate": deletes},
        )
    limit = policy.max_files_per_bucket
    if limit and files > limit:
        # Necessary, not sufficient: the summary has no per-partition counts.
        return Verdict(
            True,
            f"{files} data files > max_files_per_bucket {limit}: some bucket may hold more; "
            "the bucket rule needs the planner's file listing, which counts files per bucket",
            metrics,
        )
    return Verdict(
        False,
        f"{reducible} reducible files < min_small_files {policy.min_small_files} and "
        f"deleted-row ratio {deleted_ratio} < {policy.delete_ratio_threshold}",
        metrics,
    )


def _full_tier(
    policy: CompactionPolicy, groups: Iterable[list[DataFile]], min_input: int
) -> int | None:
    """The largest tier that some partition has enough files *of its own size* to merge:
    the lowest tier needs `min_input` (min_input_files), the ones above `tier_min_files`
    (no more than min_input). Counting only a tier's own files, and merging the largest
    full one first, is what lets the upper tiers merge at all: counted with everything
    under them, the lowest tier was full after every round of small appends and the upper
    ones never merged (B3: 4x the files of full bin-pack at the end). None: no tier full."""
    bounds = policy.tier_bounds()
    upper = min(policy.tier_min_files, min_input)
    full: int | None = None
    for group in groups:
        counts = Counter(bisect_right(bounds, f.size) for f in group)
        for level in range(len(bounds)):
            if counts[level] >= (min_input if level == 0 else upper):
                full = level if full is None else max(full, level)
    return full


def plan_from_files(
    policy: CompactionPolicy,
    snapshot_id: int | None,
    files: list[DataFile],
    delete_files: int = 0,
    buckets: dict[int, KeyBucket] | None = None,
    quiet_minutes: float | None = None,
    deletion_vectors: int = 0,
) -> PlanOutcome:
    """Pure planning over file descriptions (unit-tested without a table). `buckets`: spec id
    -> its partition field bucketing the key (metadata.key_buckets), for primary-key tables.
    `deletion_vectors`: how many of the `delete_files` are v3 deletion vectors (applied by
    the rewrite of their data file; Iceberg's position-delete rewrite leaves them alone).
    `quiet_minutes`: how long no data commit has touched the table, when that is at least
    the policy's `tier_quiet_merge_minutes` (the major merge of a tiered table)."""
    if snapshot_id is None:
        return PlanOutcome(None, "table has no snapshot: nothing to compact")
    groups: dict[tuple[int, Partition], list[DataFile]] = defaultdict(list)
    for f in files:
        groups[(f.spec_id, f.partition)].append(f)
    # Primary-key tables (max_files_per_bucket > 0 and a spec bucketing the key): the groups
    # are buckets. Iceberg takes one min-input-files for the whole run, so while a bucket is
    # over the limit even two small files are merged, in any partition.
    limit = policy.max_files_per_bucket
    keyed = {k: g for k, g in groups.items() if limit and buckets and k[0] in buckets}
    over = {k: len(g) for k, g in keyed.items() if len(g) > limit}
    min_input = 2 if over else policy.min_input_files
    threshold = policy.small_file_threshold_bytes
    target = policy.target_file_size_bytes
    tier: dict[str, int] | None = None
    major = quiet_minutes if policy.tiers else None  # the quiet time of a major merge
    if major is not None:
        min_input = 2  # every partition's small files, whatever their tier, into one size
    elif policy.tiers:
        level = _full_tier(policy, groups.values(), min_input)
        if level is not None:
            bounds = policy.tier_bounds()
            # Merge that tier, and the smaller files under it (Iceberg selects by size
            # alone), into files the size of the next tier (or the target).
            output = bounds[level + 1] if level + 1 < len(bounds) else target
            threshold, target = bounds[level], output
            tier = {
                "level": level,
                "files_below_bytes": threshold,
                "output_file_bytes": output,
            }

    partitions: list[dict[str, Any]] = []
    for (spec_id, partition), group in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        small = [f for f in group if f.size < threshold]
        rewrite = small if len(small) >= min_input else []
        # A keyed table applies every delete (Iceberg's delete-file-threshold 1), so that the
        # equality deletes can go: each applies to every older data file of its partition.
        # (not `f not in rewrite`: a list scan per file, quadratic in a partition's files)
        hollow = [
            f
            for f in group
            if not (rewrite and f.size < threshold)
            and f.records
            and (
                f.deleted_records > 0
                if keyed
                else f.deleted_records / f.records >= policy.delete_ratio_threshold
            )
        ]
        rewrite_bytes = sum(f.size for f in rewrite) + sum(f.size for f in hollow)
        after = math.ceil(rewrite_bytes / target) if rewrite_bytes else 0
        if not hollow and (not rewrite or after >= len(rewrite)):
            continue
        partitions.append(
            {
                "spec_id": spec_id,
                "partition": {k: jsonable(v) for k, v in partition},
                "data_files": len(group),
                "small_files": len(rewrite),
                "files_with_deletes": len(hollow),
                "rewrite_bytes": rewrite_bytes,
                "records": sum(f.records for f in rewrite + hollow),
                "expected_files_after": len(group) - len(rewrite) - len(hollow) + after,
            }
        )
        if (spec_id, partition) in over:
            partitions[-1]["over_bucket_limit"] = True
    small_total = sum(1 for f in files if f.size < threshold)
    unbucketed = (
        f"; max_files_per_bucket {limit} does nothing here: no partition field buckets the "
        "key (bucket(N, key) on an identifier field)"
        if limit and not buckets
        else ""
    )
    bucket_note = (
        f"{len(over)} bucket(s) hold more than max_files_per_bucket {limit} data files "
        f"(most: {max(over.values())})"
        if over
        else ""
    )
    if not partitions:
        deleted = (
            "with a delete applied"
            if keyed
            else (f"with >= {policy.delete_ratio_threshold:.0%} rows deleted")
        )
        return PlanOutcome(
            None,
            (f"{bucket_note} but " if over else "")
            + f"no partition has >= {min_input} files under {threshold} bytes "
            f"or a file {deleted} "
            f"({small_total} small of {len(files)} data files in {len(groups)} partitions)"
            + unbucketed,
        )
    rewritten = sum(p["small_files"] + p["files_with_deletes"] for p in partitions)
    files_after = len(files) - sum(p["data_files"] - p["expected_files_after"] for p in partitions)
    plan = {
        "action": "rewrite_data_files",
        "strategy": "binpack",
        "snapshot_id": snapshot_id,
        "options": {
            "target-file-size-bytes": str(target),
            "min-file-size-bytes": str(threshold),
            "min-input-files": str(min_input),
            "delete-ratio-threshold": f"{policy.delete_ratio_threshold:.4f}",
            # commit per file group: a conflict with a writer loses only that group
            "partial-progress.enabled": "true",
            "partial-progress.max-commits": "10",
        },
        # Iceberg 1.12's rewrite_position_delete_files does nothing to deletion vectors (it
        # returns 0 rewritten on a v3 table): asked for only where v2 delete files remain.
        "rewrite_position_deletes": delete_files - deletion_vectors > 0,
        # file groups that are plain copies rewritten by pyarrow (lakewarden.spark.arrow_rewrite)
        "native_rewrite": policy.native_rewrite,
        "tier": tier,
        "major_merge": {"quiet_minutes": round(major, 1)} if major is not None else None,
        "partitions": partitions,
        "files_before": len(files),
        "files_to_rewrite": rewritten,
        "bytes_to_rewrite": sum(p["rewrite_bytes"] for p in partitions),
        "expected_files_after": files_after,
    }
    if keyed:
        plan["options"]["delete-file-threshold"] = "1"
        field = next(iter(buckets.values())).field if buckets else ""
        plan["buckets"] = {
            "field": field,
            "max_files_per_bucket": limit,
            "buckets": len(keyed),
            "most_data_files": max(len(g) for g in keyed.values()),
            "over_limit": len(over),
        }
    if delete_files:
        # delete files whose data files were all rewritten go with them
        plan["options"]["remove-dangling-deletes"] = "true"
    if deletion_vectors:
        plan["deletion_vectors"] = deletion_vectors
    if tier is not None:
        # A lower output size must not make Iceberg split the large files (it rewrites files
        # above max-file-size-bytes): keep that bound where the real target puts it.
        plan["options"]["max-file-size-bytes"] = str(int(policy.target_file_size_bytes * 1.8))
    reason = (
        f"rewrite {rewritten} data files in {len(partitions)} partition(s): "
        f"{len(files)} -> ~{files_after} data files"
    )
    if over:
        reason = f"{bucket_note}; {reason}"
    if tier is not None:
        reason += (
            f" (tier L{tier['level']}: files under {tier['files_below_bytes']} bytes "
            f"into ~{tier['output_file_bytes']}-byte files)"
        )
    if major is not None:
        reason += (
            f" (major merge: no data commit for {major:.0f} min, tier_quiet_merge_"
            f"minutes {policy.tier_quiet_merge_minutes:g}: every tier into target-size files)"
        )
    if keyed:
        reason += "; every data file with a delete applied is rewritten (primary-key table)"
    if deletion_vectors:
        hollowed = sum(p["files_with_deletes"] for p in partitions)
        reason += (
            f"; the table has {deletion_vectors} deletion vector(s) (format v3): each "
            f"rewritten data file's is applied and dropped ({hollowed} rewritten for their "
            "deletes), no position-delete rewrite (Iceberg's does nothing to them)"
        )
    return PlanOutcome(plan, reason + unbucketed)


def target_branch(policy: CompactionPolicy) -> str | None:
    """The branch a compaction rewrites; None for main."""
    return None if policy.branch in (None, MAIN_BRANCH) else policy.branch


def plan(policy: CompactionPolicy, table: Table, now: datetime) -> PlanOutcome:
    """main's files, or those of `compaction.branch`; the plan says which branch."""
    branch = target_branch(policy)
    quiet = quiet_minutes(policy, table, branch, now)
    outcome = (
        _plan_branch(policy, table, branch, quiet) if branch else _plan_main(policy, table, quiet)
    )
    if outcome.plan is None:
        return outcome
    return PlanOutcome({**outcome.plan, "branch": branch or MAIN_BRANCH}, outcome.reason)


def quiet_minutes(
    policy: CompactionPolicy, table: Table, branch: str | None, now: datetime
) -> float | None:
    """Minutes since the ref's last data commit (any but a rewrite, `replace`), when they
    reach the policy's tier_quiet_merge_minutes on a tiered table; None otherwise."""
    if not policy.tiers or policy.tier_quiet_merge_minutes is None:
        return None
    ref = table.metadata.refs.get(branch or MAIN_BRANCH)
    head = table.snapshot_by_id(ref.snapshot_id) if ref is not None else None
    for snapshot in history.ancestors(table, head, history.MAX_JOB_WALK):
        if snapshot.summary is None or snapshot.summary.operation.value != "replace":
            quiet = (now.timestamp() * 1000 - snapshot.timestamp_ms) / 60_000
            return quiet if quiet >= policy.tier_quiet_merge_minutes else None
    return None  # only rewrites within the walk: judged again by the next sweep


def _plan_branch(
    policy: CompactionPolicy, table: Table, branch: str, quiet: float | None = None
) -> PlanOutcome:
    """A named branch: its head planned as main's would be. Its position-delete files stay
    (Iceberg's procedure for them knows only main)."""
    if not open_table(table).refs().is_branch(branch):
        return PlanOutcome(
            None,
            f"the table has no branch {branch!r}: nothing to compact (create it, or set "
            "compaction.branch to null for main)",
        )
    listing = manifest_cache.shared().listing(table, ref=branch)
    files = listing.files
    outcome = _explained(
        plan_from_files(
            policy,
            files.snapshot_id,
            files.data,
            len(files.deletes),
            quiet_minutes=quiet,
            deletion_vectors=_deletion_vectors(files),
        ),
        listing,
    )
    reason = f"branch {branch}: {outcome.reason}"
    if outcome.plan is None:
        return PlanOutcome(None, reason)
    on_branch = PlanOutcome({**outcome.plan, "rewrite_position_deletes": False}, reason)
    return in_declared_order(policy, table, on_branch)


def _plan_main(policy: CompactionPolicy, table: Table, quiet: float | None = None) -> PlanOutcome:
    listing = manifest_cache.shared().listing(table)
    files = listing.files
    outcome = plan_from_files(
        policy,
        files.snapshot_id,
        files.data,
        len(files.deletes),
        key_buckets(table),
        quiet,
        _deletion_vectors(files),
    )
    return in_declared_order(policy, table, _explained(outcome, listing))


def _deletion_vectors(files: TableFiles) -> int:
    return sum(1 for d in files.deletes if d.is_deletion_vector)


def _explained(outcome: PlanOutcome, listing: manifest_cache.Listing) -> PlanOutcome:
    """The reason says when the files came (partly) from the plan cache."""
    how = listing.explain()
    return PlanOutcome(outcome.plan, f"{outcome.reason} ({how})") if how else outcome


def in_declared_order(policy: CompactionPolicy, table: Table, outcome: PlanOutcome) -> PlanOutcome:
    """A table that declares a sort order is compacted into it (Iceberg's sort strategy
    with the table's own order: what its writers are asked to write), unless the policy's
    `sort_by_table_order` is off; the plan and the reason say which order."""
    order = declared_order(table)
    if outcome.plan is None or order is None:
        return outcome
    if not policy.sort_by_table_order:
        return PlanOutcome(
            outcome.plan,
            f"{outcome.reason}; bin-packed, not sorted into the table's declared order "
            f"({order.description}): compaction.sort_by_table_order is off",
        )
    return PlanOutcome(
        {**outcome.plan, "strategy": "sort", "sort_order": "table", "declared": order.description},
        f"{outcome.reason}, sorted into the table's declared order ({order.description})",
    )


def compaction_sql(catalog: str, ref: TableRef, plan: dict[str, Any]) -> str:
    """The CALL statement for a compaction plan (pure; tested without Spark)."""
    strategy = plan.get("strategy")
    sorted_ = strategy == "sort" and plan.get("sort_order") == "table"
    if plan.get("action") != "rewrite_data_files" or not (strategy == "binpack" or sorted_):
        raise PlanRejected(f"not a compaction plan: {plan.get('action')}/{strategy}")
    opts = sql.option_map(plan.get("options", {}), OPTIONS)
    # strategy 'sort' without a sort_order: Iceberg sorts by the table's own order
    return (
        f"{sql.procedure(catalog, 'rewrite_data_files')}(table => {sql.table_arg(catalog, ref)}, "
        f"strategy => '{strategy}', options => {opts})"
    )


def _configure(plan: dict[str, Any]) -> Callable[[Any, Any, Any], Any]:
    """The action's strategy: bin-pack, or a sort by the table's declared order."""
    if plan.get("strategy") == "sort":
        return lambda action, table, jvm: action.sort()
    return lambda action, table, jvm: action.binPack()


def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
    """Through Iceberg's Java action (lakewarden.spark.actions): the commit carries the
    task id and attempt."""
    compaction_sql(catalog, ref, plan)  # the same validation as the SQL form
    branch = plan.get("branch")
    if branch is not None and branch != MAIN_BRANCH:
        if not isinstance(branch, str) or not re.fullmatch(REF_NAME, branch):
            raise PlanRejected(f"invalid branch {branch!r}")
        on_branch = rewrite_data_files(
            spark,
            catalog,
            ref,
            plan.get("options", {}),
            _configure(plan),
            branch=branch,
            binpack=plan.get("strategy") != "sort",
            native=plan.get("native_rewrite", True) is not False,
        )
        return JobResult(on_branch, on_branch.pop(COMMITTED, None))
    metrics: dict[str, Any] = rewrite_data_files(
        spark,
        catalog,
        ref,
        plan.get("options", {}),
        _configure(plan),
        binpack=plan.get("strategy") != "sort",
        native=plan.get("native_rewrite", True) is not False,
    )
    if plan.get("rewrite_position_deletes"):
        pos = (
            spark.sql(
                f"{sql.procedure(catalog, 'rewrite_position_delete_files')}"
                f"(table => {sql.table_arg(catalog, ref)})"
            )
            .collect()[0]
            .asDict()
        )
        metrics["rewritten_delete_files"] = pos.get("rewritten_delete_files_count", 0)
        metrics["added_delete_files"] = pos.get("added_delete_files_count", 0)
    committed = metrics.pop(COMMITTED, None)
    if metrics.get("rewritten_delete_files") or (
        committed is None and metrics["rewritten_data_files"]
    ):
        # The delete-file procedure's commit carries no task id: the newest rewrite it is.
        committed = history.newest_rewrite(spark, ref.spark_name(catalog))
    return JobResult(metrics, committed)


# Swept by time too, only where the policy tiers with a quiet merge (sweep_minutes).
KIND = Kind(name="compaction", plan=plan, run=run, event_verdict=event_verdict, swept=True)
